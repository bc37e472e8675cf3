"""Max and average pools of bf16 models as oneDNN's pooling primitive.

In bf16, a pool between two convolutions reads and writes channels-last bf16
maps. oneDNN's jit pooling kernel (``jit:avx512_core_bf16``) runs ResNet's
stem max pool (112x112x64 -> 56x56x64, 3x3 stride 2) in 41 us on two cores,
where SOL's generated channels-last loop takes 81 us (both with the data in
the cache): the generated loop keeps its per-pixel accumulators in memory and
converts every tap from bf16. fp32 models keep the generated kernels (their
speed and results stay as they were).

Only pools whose result a library call reads are taken (`library_pools`, from
the graph the module `sees` before planning): that result is then stored in
bf16, as oneDNN's bf16 pooling writes it. Where only generated code reads it,
it stays float32 and the generated Cluster, which also fuses what follows
(DenseNet's BatchNorm and ReLU), stays faster.

The pool's output size is the graph's; oneDNN's right padding is derived
from it, so ceil_mode needs no flag. An average over a window that reaches
past the declared padding (ceil_mode's extra windows) is taken only when the
divisor excludes the padding: PyTorch's divisor with ``count_include_pad``
never counts that extension, oneDNN's would.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import sol
from sol.codegen.layout import channels_last
from sol.ir import Layer, Tensor
from sol.records import ConfigKey

OPS = frozenset({"max_pool", "avg_pool"})

ONEDNN_POOLS_KEY = ConfigKey(
    "x86::onednn_pools", bool, True,
    "In bf16, run max and average pools as oneDNN's pooling primitive (ResNet's stem max pool 41 against 81 us); "
    "off: SOL's generated pooling loops, as in fp32.")


def enabled() -> bool:
    return bool(sol.config.get(ONEDNN_POOLS_KEY.name, ONEDNN_POOLS_KEY.default))


def settings() -> str:
    """What decides which pools oneDNN runs besides the graph (for cache keys of generated code)."""
    return f"onednn pools {int(enabled())}"


def _spatial(layer: Layer) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int]] | None:
    """(input sizes, kernel, stride, dilation, left pads, right pads) of the pool's spatial dims, or None where the
    sizes are not static or no non-negative right padding gives the graph's output size."""
    from sol.codegen.kernels.base import spatial_padding  # lazy: the kernels load every op

    x, out = layer.inputs[0], layer.outputs[0]
    kernel = [int(k) for k in layer.attrs["kernel"]]
    r = len(kernel)
    sizes = [*x.shape[2:], *out.shape[2:]]
    if x.rank != r + 2 or not all(isinstance(s, int) for s in sizes):
        return None
    stride = [int(s) for s in (layer.attrs.get("stride") or kernel)]
    dilation = [int(d) for d in (layer.attrs.get("dilation") or [1] * r)]
    pads = spatial_padding(layer.attrs.get("padding", 0), r)
    ins, outs = [int(s) for s in x.shape[2:]], [int(s) for s in out.shape[2:]]
    left, right = [], []
    for i in range(r):
        reach = dilation[i] * (kernel[i] - 1) + 1
        needed = (outs[i] - 1) * stride[i] + reach - ins[i] - pads[i][0]  # where the last window ends
        end = max(needed, 0)
        if (ins[i] + pads[i][0] + end - reach) // stride[i] + 1 != outs[i]:
            return None
        left.append(pads[i][0])
        right.append(end)
    return ins, kernel, stride, dilation, left, right


#: layers whose input 0 oneDNN reads in bf16, so that a pool's result they read is stored bf16
_LIBRARY_READERS = frozenset({"conv", "linear", "matmul"})


def library_pools(layers: Sequence[Layer], library_runs: Callable[[Layer], bool],
                  activations: Collection[str]) -> dict[int, Tensor]:
    """id -> result, of the pools of ``layers`` that oneDNN runs: those it computes (`accepts`) whose result, after
    the ``activations`` it fuses as post-ops (a ReLU after ResNet's stem pool), a library call reads as its input
    (``library_runs``: the module's own `accepts`).

    The result is then stored in bf16 (`sol.codegen.storage`: a library reader wants it), which is what oneDNN's bf16
    pooling writes. A pool only generated code reads keeps its generated loop: its result stays float32 there, which
    oneDNN 3.2's bf16 pooling does not write (it fell back to fp32 with its source converted: DenseNet's stem pool,
    read by the first dense layer's BatchNorm and concatenation, took 254 us that way against the generated
    Cluster's 96 us, which also fuses that BatchNorm and ReLU).
    """
    readers: dict[int, list[Layer]] = {}
    for layer in layers:
        for t in layer.inputs:
            readers.setdefault(id(t), []).append(layer)
    taken: dict[int, Tensor] = {}
    for layer in layers:
        if layer.op not in OPS or not accepts(layer):
            continue
        result = layer.outputs[0]
        while len(readers.get(id(result), [])) == 1 and readers[id(result)][0].op in activations:
            result = readers[id(result)][0].outputs[0]  # a post-op of the pool's call
        if any(r.op in _LIBRARY_READERS and r.inputs[0] is result and library_runs(r)
               for r in readers.get(id(result), [])):
            taken[id(layer.outputs[0])] = layer.outputs[0]
    return taken


def accepts(layer: Layer) -> bool:
    """Whether oneDNN's pooling computes ``layer`` as PyTorch does (2-D and 3-D pools over static sizes)."""
    if not enabled() or layer.op not in OPS or len(layer.inputs) != 1 or layer.inputs[0].rank not in (4, 5):
        return False
    if layer.op == "avg_pool" and layer.attrs.get("divisor_override"):
        return False
    spatial = _spatial(layer)
    if spatial is None:
        return False
    if layer.op == "avg_pool" and layer.attrs.get("count_include_pad", True):
        from sol.codegen.kernels.base import spatial_padding

        declared = spatial_padding(layer.attrs.get("padding", 0), len(spatial[1]))
        if any(end > pad_end for end, (_, pad_end) in zip(spatial[5], declared, strict=True)):
            return False  # a window past the declared padding: PyTorch's divisor leaves that part out
    return True


def layout(layer: Layer) -> tuple[int, ...]:
    """The memory order of the pool's input and output: channels-last, as the convolutions around it."""
    return channels_last(layer.inputs[0].rank)


def describe(layer: Layer) -> list[str]:
    """The descriptor statements of the pool besides its tensors (sol_dnnl.h, SOL_DNNL_POOL)."""
    spatial = _spatial(layer)
    assert spatial is not None, f"{layer.name}: not a pool oneDNN takes (accepts() said so)"
    _, kernel, stride, dilation, left, right = spatial
    if layer.op == "max_pool":
        alg = "SOL_DNNL_POOL_MAX"
    elif layer.attrs.get("count_include_pad", True):
        alg = "SOL_DNNL_POOL_AVG_INCLUDE_PAD"
    else:
        alg = "SOL_DNNL_POOL_AVG_EXCLUDE_PAD"
    lines = ["d->op = SOL_DNNL_POOL;", f"d->pool_alg = {alg};"]
    values = (("kernel", kernel), ("stride", stride), ("dilation", [d - 1 for d in dilation]), ("pad_l", left),
              ("pad_r", right))
    for name, items in values:
        lines += [f"d->{name}[{i}] = {v};" for i, v in enumerate(items)]
    return lines
