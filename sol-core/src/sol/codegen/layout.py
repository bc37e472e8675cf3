"""Planning, part 0: the memory layout of every tensor of the main program.

A layout is the order of a tensor's dims in memory, outermost first
(``(0, 2, 3, 1)`` is channels-last NHWC for a 4-d tensor); a tensor without
an entry is plain row-major. The DNN module says what its library calls
read and write best (oneDNN: channels-last activations); DFP kernels that
access tensors only through `KernelContext.load` are correct in any layout,
so their outputs follow their inputs' layout and no reorder is needed
between a library call and the elementwise/pooling/concat code around it.
Kernels that index raw pointers (reshape, layer_norm, DFP linear...) and
the model outputs need plain tensors; a conversion (an ``identity`` layer,
which clustering fuses into the producer when the producer is DFP code) is
inserted only where a consumer needs another layout than its producer wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir import Layer, Tensor
from .dnn import DnnModule

#: layout-aware ops whose outputs keep the channel at dim 1 and the rank of input 0 (they inherit its layout)
LAYOUT_PRESERVING = frozenset({
    "max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "slice", "concat", "split", "pad",
    "channel_shuffle", "batch_norm", "batch_norm_train", "batch_norm_train_grad", "max_pool_grad", "avg_pool_grad",
    "adaptive_avg_pool_grad", "adaptive_max_pool_grad",
})
#: ops whose kernels read every input through KernelContext.load (correct in any layout)
LAYOUT_AWARE = LAYOUT_PRESERVING | {"reduce_sum", "reduce_mean", "reduce_max", "softmax", "log_softmax", "permute",
                                    "expand"}

Layouts = dict[int, tuple[int, ...]]


def channels_last(rank: int) -> tuple[int, ...] | None:
    """N, spatial..., C for tensors with 1-3 spatial dims."""
    return (0, *range(2, rank), 1) if 3 <= rank <= 5 else None


def plain(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def same_memory(tensor: Tensor, a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two layouts place every element of ``tensor`` at the same offset (dims of size 1 do not matter)."""
    def significant(order: Sequence[int]) -> list[int]:
        return [d for d in order if tensor.shape[d] != 1]

    return significant(a) == significant(b)


def permuted_layout(layer: Layer, source: Sequence[int]) -> tuple[int, ...] | None:
    """The layout of a permute's output that leaves every element where its input's layout ``source`` has it.

    Only plain and channels-last are taken (the layouts the kernels and library calls are made for); with it
    the permute is a free view (`same_memory_permute`). ConvNeXt permutes a Linear's plain NHWC output back
    to NCHW before the next depthwise convolution: channels-last there, that is no transpose at all.
    """
    out = layer.outputs[0]
    position = {d: j for j, d in enumerate(layer.attrs["perm"])}  # input dim -> output dim
    order = tuple(position[d] for d in source)
    return order if order in (plain(out.rank), channels_last(out.rank)) else None


def same_memory_permute(layer: Layer, layouts: Layouts) -> bool:
    """Whether a permute's output, in its planned layout, lies in memory exactly as its input does."""
    x, out = layer.inputs[0], layer.outputs[0]
    target = [layer.attrs["perm"][j] for j in layouts.get(id(out), plain(out.rank))]  # in input dims
    return same_memory(x, layouts.get(id(x), plain(x.rank)), target)


def layout_aware(op: str) -> bool:
    from .kernels import EXPRESSIONS  # lazy: see sol.codegen.cluster

    return op in LAYOUT_AWARE or op in EXPRESSIONS


def plan_layouts(layers: Sequence[Layer], outputs: Sequence[Tensor], dnn: DnnModule | None,
                 in_library: Callable[[Layer], bool], given: Layouts | None = None) -> tuple[list[Layer], Layouts]:
    """The main layers (conversions inserted, consumers re-pointed) and the layout of every non-plain tensor.

    ``outputs``: the model outputs that must be plain; ``in_library(layer)``: whether the DNN module runs
    the layer (it decides that layer's layouts); ``given``: layouts of inputs that arrive non-plain.
    """
    layouts: Layouts = {k: tuple(v) for k, v in (given or {}).items()}
    output_ids = {id(t) for t in outputs}
    conversions: dict[tuple[int, tuple[int, ...]], Tensor] = {}
    result: list[Layer] = []

    def have(t: Tensor) -> tuple[int, ...]:
        return layouts.get(id(t), plain(t.rank))

    def record(t: Tensor, order: tuple[int, ...] | None) -> None:
        if order is not None and not same_memory(t, order, plain(t.rank)):
            layouts[id(t)] = order

    #: model outputs a library call wrote in its own layout first: id(plain output) -> that copy
    shadows: dict[int, Tensor] = {}
    #: tensors a library call writes, directly or through elementwise layers after it -> that call
    from_library: dict[int, Layer] = {}
    made_at: dict[int, int] = {}  # id(tensor) -> index in result of the layer that writes it
    #: layout conversions of post-op operands, run before the call they join: id(call) -> conversions
    hoisted: dict[int, list[Layer]] = {}
    for layer in layers:
        library = in_library(layer)
        inputs = list(layer.inputs)
        # the library call or an elementwise layer after it (a post-op candidate)
        written = _library_written(layer, from_library, shadows)
        call = written[0][1] if written else None
        near_library = library or (_elementwise(layer.op) and call is not None)
        # a post-op candidate's full-size operands go into the call's layout: the library fuses them only then
        post_op_layout = None
        if near_library and not library:
            post_op_layout = next((have(t) for t, _ in written if t.shape == layer.outputs[0].shape), None)
        for i, t in enumerate(inputs):
            want = _wanted(layer, i, dnn if library else None)
            operand = post_op_layout is not None and t.shape == layer.outputs[0].shape and id(t) not in from_library
            if operand:
                want = post_op_layout
            shadow = shadows.get(id(t))
            if shadow is not None and (want is None or same_memory(t, have(shadow), want)):
                inputs[i] = shadow
                continue
            if want is None or same_memory(t, have(t), want):
                continue
            key = (id(t), want)
            if key not in conversions:
                converted = Tensor(f"{t.name}_{'plain' if want == plain(t.rank) else 'cl'}", t.dims, t.dtype)
                record(converted, want)
                conversion = Layer("identity", [t], [converted], {}, f"{layer.name}.layout{i}")
                if operand and call is not None and made_at.get(id(t), -1) < made_at[id(call.outputs[0])]:
                    hoisted.setdefault(id(call), []).append(conversion)  # ready when the call starts
                else:
                    made_at[id(converted)] = len(result)
                    result.append(conversion)
                conversions[key] = converted
            inputs[i] = conversions[key]
        if inputs != layer.inputs:
            layer = Layer(layer.op, inputs, layer.outputs, layer.attrs, layer.name)
        chain = layer if library else call
        if near_library and dnn is not None and len(layer.outputs) == 1 and id(layer.outputs[0]) in output_ids:
            # a model output must be plain, but a library call writing a layout other than its input's can
            # leave only the library's slow reference kernel: it writes its own layout, then a copy
            out = layer.outputs[0]
            order = dnn.output_layout(layer) if library else _produced(layer, out, None, have)
            if order is not None and not same_memory(out, order, plain(out.rank)):
                shadow = Tensor(f"{out.name}_cl", out.dims, out.dtype)
                record(shadow, order)
                written = Layer(layer.op, inputs, [shadow], layer.attrs, layer.name)
                made_at[id(shadow)] = len(result)
                result.append(written)
                result.append(Layer("identity", [shadow], [out], {}, f"{layer.name}.layout_out"))
                shadows[id(out)] = shadow
                from_library[id(shadow)] = written if library else chain  # type: ignore[assignment]
                continue
        if near_library:  # elementwise chains after a call are post-op candidates all the way down
            from_library.update((id(t), chain) for t in layer.outputs)  # type: ignore[misc]
        for t in layer.outputs:
            made_at[id(t)] = len(result)
        result.append(layer)
        for t in layer.outputs:
            if id(t) not in output_ids:  # model outputs are the framework's plain buffers
                record(t, _produced(layer, t, dnn if library else None, have))
    if hoisted:
        result = [before for layer in result for before in [*hoisted.get(id(layer), ()), layer]]
    return result, layouts


def _library_written(layer: Layer, from_library: dict[int, Layer],
                     shadows: dict[int, Tensor]) -> list[tuple[Tensor, Layer]]:
    """The inputs of ``layer`` a library call wrote (directly or through post-op candidates), with that call;
    a model output is replaced by the library's own-layout copy of it (its shadow)."""
    inputs = (shadows.get(id(t), t) for t in layer.inputs)
    return [(t, from_library[id(t)]) for t in inputs if id(t) in from_library]


def _elementwise(op: str) -> bool:
    from .kernels import EXPRESSIONS  # lazy: see sol.codegen.cluster

    return op in EXPRESSIONS


def _wanted(layer: Layer, index: int, dnn: DnnModule | None) -> tuple[int, ...] | None:
    """The layout input ``index`` must have (None: any)."""
    t = layer.inputs[index]
    if dnn is not None:
        return dnn.input_layout(layer, index) or plain(t.rank)
    if layout_aware(layer.op):
        return None
    return plain(t.rank)


def _produced(layer: Layer, out: Tensor, dnn: DnnModule | None, have) -> tuple[int, ...] | None:  # type: ignore[no-untyped-def]
    if dnn is not None:
        return dnn.output_layout(layer)
    from .kernels import EXPRESSIONS

    if layer.op in EXPRESSIONS:
        # elementwise: the layout of an operand of the output's shape (so the nest runs in memory order)
        for t in layer.inputs:
            if t.shape == out.shape and have(t) != plain(t.rank):
                return have(t)
        return None
    if layer.op == "permute":
        return permuted_layout(layer, have(layer.inputs[0]))
    if layer.op in LAYOUT_PRESERVING and layer.inputs and layer.inputs[0].rank == out.rank:
        first = have(layer.inputs[0])
        return first if first != plain(out.rank) else None
    return None
