"""Conv forward and its two gradients as cuDNN calls: the host-side plan of each call (descriptor parameters).

cuDNN's legacy convolution API (``cudnnConvolutionForward``,
``cudnnConvolutionBackwardData``, ``cudnnConvolutionBackwardFilter`` with
4-d tensor, filter and convolution descriptors) is used rather than the graph
API: it is a handful of calls with fixed, documented semantics, so generated
code that was only compiled (no GPU here) is most likely right the first time,
while the graph API's engine configurations and plans only fail at run time.
It is still part of cuDNN 9 (``libcudnn_cnn``).

A `ConvPlan` holds exactly the descriptor parameters (NCHW float tensors, a
``[K, C/groups, R, S]`` filter, symmetric padding, strides, dilations, the
group count) with sizes as SOL sizes; `ConvPlan.output_hw` is cuDNN's own
output-size rule (``cudnnGetConvolution2dForwardOutputDim``), which the
generated code also checks at run time. Only 2-d convolutions with
symmetric padding are planned; others stay generated code.
"""

from __future__ import annotations

from dataclasses import dataclass

from sol.ir import Layer, Size

#: which cuDNN routine a plan is for
FORWARD, BACKWARD_DATA, BACKWARD_FILTER = "forward", "backward_data", "backward_filter"


@dataclass(frozen=True)
class ConvPlan:
    """One cuDNN convolution: ``x [n, c, h, w] * filter [k, c/groups, r, s] -> y [n, k, p, q]``.

    ``kind``: FORWARD (x, filter -> y), BACKWARD_DATA (dy, filter -> dx), BACKWARD_FILTER (x, dy -> dfilter);
    the descriptors are always those of the forward convolution.
    """

    kind: str
    n: Size
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    p: int
    q: int
    bias: bool = False
    relu: bool = False

    def output_hw(self) -> tuple[int, int]:
        """cuDNN's forward output size for these descriptors (``cudnnGetConvolution2dForwardOutputDim``)."""
        return (_out(self.h, self.pad[0], self.dilation[0], self.r, self.stride[0]),
                _out(self.w, self.pad[1], self.dilation[1], self.s, self.stride[1]))

    def consistent(self) -> bool:
        return self.output_hw() == (self.p, self.q) and self.c % self.groups == 0 and self.k % self.groups == 0


def _out(size: int, pad: int, dilation: int, kernel: int, stride: int) -> int:
    return (size + 2 * pad - (dilation * (kernel - 1) + 1)) // stride + 1


def _symmetric(padding: object) -> tuple[int, int] | None:
    from sol.codegen.kernels.base import spatial_padding  # lazy: the kernels package loads every op

    pads = spatial_padding(padding, 2)
    if len(pads) != 2 or any(begin != end for begin, end in pads):
        return None
    return (pads[0][0], pads[1][0])


def _static(*sizes: Size) -> bool:
    return all(isinstance(s, int) for s in sizes)


def plan_conv(layer: Layer) -> ConvPlan | None:
    """The plan of a conv, its input gradient (conv_transpose with ``conv_input_grad``) or conv_grad_weight; None
    where cuDNN's legacy API cannot run it as such (not 2-d, asymmetric padding, sizes that do not match)."""
    a = layer.attrs
    if layer.op == "conv":
        x, w, y, kind = layer.inputs[0], layer.inputs[1], layer.outputs[0], FORWARD
        filter_shape, pad = w.shape, _symmetric(a["padding"])
    elif layer.op == "conv_transpose" and a.get("conv_input_grad"):
        # conv_transpose(dy, w) = the input gradient of conv(dx, w): the forward descriptors are dx's and dy's
        y, w, x, kind = layer.inputs[0], layer.inputs[1], layer.outputs[0], BACKWARD_DATA
        filter_shape = w.shape
        pad = tuple(int(p) for p in a["padding"]) if len(a["padding"]) == 2 else None
    elif layer.op == "conv_grad_weight":
        x, y, kind = layer.inputs[0], layer.inputs[1], BACKWARD_FILTER
        filter_shape, pad = layer.outputs[0].shape, _symmetric(a["padding"])
    else:
        return None
    if x.rank != 4 or y.rank != 4 or len(filter_shape) != 4 or pad is None:
        return None
    if not _static(*x.shape[1:], *y.shape[1:], *filter_shape) or x.shape[0] != y.shape[0]:
        return None
    if any(t.dtype != "float32" for t in (*layer.inputs, *layer.outputs)):
        return None
    groups = int(a.get("groups", 1))
    plan = ConvPlan(kind, x.shape[0], int(x.shape[1]), int(x.shape[2]), int(x.shape[3]), int(y.shape[1]),
                    int(filter_shape[2]), int(filter_shape[3]), (int(pad[0]), int(pad[1])),
                    (int(a["stride"][0]), int(a["stride"][1])), (int(a["dilation"][0]), int(a["dilation"][1])),
                    groups, int(y.shape[2]), int(y.shape[3]),
                    bias=kind == FORWARD and len(layer.inputs) > 2)
    if int(filter_shape[0]) != plan.k or int(filter_shape[1]) * groups != plan.c:
        return None
    # a transposed conv's output_padding makes dx larger than the conv needs: cuDNN maps it onto dy all the same
    # exactly when the forward rule gives dy's size (the extra rows are never read, their gradient is zero)
    return plan if plan.consistent() else None
