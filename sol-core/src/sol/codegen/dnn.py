"""The DNN module interface: library calls (oneDNN, cuDNN, vednn...) for Conv/Linear/MatMul.

sol-core stays backend-neutral: it plans *which* layers a library runs and
which elementwise layers after them the library fuses (post-ops), chooses
memory layouts with the module's preferences, and places the module's code
into the generated source. A backend supplies a `DnnModule` through its
flavour (``Flavour.dnn``); a flavour without one generates pure DFP code.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..ir import Layer, Tensor

if TYPE_CHECKING:  # kernels import the flavour, which names this module
    from .kernels import KernelContext
    from .views import View


@dataclass
class DnnCall:
    """One library call: the anchor layer and the elementwise layers fused into it, in order."""

    index: int
    anchor: Layer
    post_ops: list[Layer] = field(default_factory=list)
    #: the planned memory order of every non-plain tensor (id -> order), for modules whose post-ops need
    #: operands in the result's layout
    layouts: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    #: a `mul` before the anchor that scales its input 0 per sample and channel (squeeze-excitation's gate), which
    #: the library folds into the weights (see `DnnModule.absorbs_input_scale`): the call reads ``source`` and
    #: ``scale``, and the scaled tensor is never written
    input_scale: Layer | None = None
    #: anchor input index -> the view it is read through where it lies (`sol.codegen.views`; its layers run nowhere)
    views: dict[int, View] = field(default_factory=dict)
    #: the view the call writes its result through (the permutes after it), or None: the result as it is
    result_view: View | None = None

    @property
    def source(self) -> Tensor:
        """What the library reads as the anchor's input 0 (before the input scale, where there is one; the base of
        the view it reads it through, where there is one)."""
        return scale_operands(self.input_scale)[0] if self.input_scale else self.operand(0)

    @property
    def scale(self) -> Tensor | None:
        return scale_operands(self.input_scale)[1] if self.input_scale else None

    def layout(self, t: Tensor) -> tuple[int, ...]:
        return self.layouts.get(id(t), tuple(range(t.rank)))

    @property
    def output(self) -> Tensor:
        """The tensor the call writes (through `result_view` where there is one)."""
        if self.result_view is not None:
            return self.result_view.base
        return (self.post_ops[-1] if self.post_ops else self.anchor).outputs[0]

    def operand(self, index: int) -> Tensor:
        """The tensor the call reads as the anchor's input ``index`` (a view's base where it reads through one)."""
        view = self.views.get(index)
        return view.base if view is not None else self.anchor.inputs[index]

    @property
    def symbol(self) -> str:
        """A C identifier unique in the model (the call's handle, fill function...)."""
        return f"sol_dnn{self.index}"


def scale_operands(mul: Layer) -> tuple[Tensor, Tensor]:
    """(scaled tensor, factors) of a `mul` whose one operand has the result's shape and the other broadcasts."""
    a, b = mul.inputs
    return (a, b) if a.shape == mul.outputs[0].shape else (b, a)


@dataclass
class DnnCode:
    """C++ a module contributes for one call; every list holds complete lines."""

    #: at file scope: handles, descriptor-filling functions
    globals: list[str] = field(default_factory=list)
    #: in ``<prefix>_init``: create primitives and reserve derived bytes (``sol_derived_reserve(bytes)``)
    init: list[str] = field(default_factory=list)
    #: at the end of prepare (after the derived parameters exist): pack weights
    prepare: list[str] = field(default_factory=list)
    #: in forward, at the call's place in the schedule
    forward: list[str] = field(default_factory=list)


class DnnModule(abc.ABC):
    """A backend's library calls (see the module docstring)."""

    #: short name, part of the cache key and of log lines
    name: str = ""

    @abc.abstractmethod
    def accepts(self, layer: Layer) -> bool:
        """Whether the library runs ``layer`` (op, dtypes, attributes)."""

    def sees(self, layers: Sequence[Layer]) -> None:
        """Called with the main program's layers (topologically ordered) before they are planned, so that a module
        whose choice for a layer depends on its neighbours (e.g., on which layers read its result) can record it
        for `accepts`. The default needs none."""
        return None

    @abc.abstractmethod
    def fuses(self, call: DnnCall, value: Tensor, layer: Layer) -> bool:
        """Whether ``layer``, which reads the call's current result ``value``, becomes a post-op of ``call``."""

    def absorbs_input_scale(self, mul: Layer, layer: Layer) -> bool:
        """Whether the call running ``layer`` takes over ``mul``, the only producer and reader of its input 0, which
        multiplies a tensor of that shape by factors per sample and channel (`scale_operands`)."""
        return False

    def input_layout(self, layer: Layer, index: int) -> tuple[int, ...] | None:
        """The memory order the library wants for input ``index`` (None: plain row-major is fine)."""
        return None

    def output_layout(self, layer: Layer) -> tuple[int, ...] | None:
        """The memory order the library writes best (None: plain)."""
        return None

    def lowers(self, layer: Layer) -> bool:
        """Whether ``layer`` runs as its decomposition (`sol.codegen.lowering`) so the library takes its parts."""
        return False

    def scales_scores(self, layer: Layer) -> bool:
        """Whether a decomposed attention multiplies its scores by the scale (a post-op of the library's matmul, so
        q reaches the matmul unchanged, see `sol.codegen.views`) rather than q (default: q, L x E products)."""
        return False

    def reads_view(self, layer: Layer, index: int, view: View) -> bool:
        """Whether the library reads input ``index`` of ``layer`` where ``view`` places it (`sol.codegen.views`);
        the view's layers then run nowhere. Default: never."""
        return False

    def writes_view(self, layer: Layer, view: View) -> bool:
        """Whether the library writes the result of ``layer`` where ``view`` places it, which completes the view's
        last tensor (the layers between run nowhere). Default: never."""
        return False

    def static_inputs(self, layer: Layer) -> Sequence[int]:
        """Inputs that are parameters the library packs once in prepare (their pointers are needed there)."""
        return ()

    # -- reduced storage (sol.codegen.storage) ------------------------------
    def reduced_storage(self) -> str | None:
        """The dtype ("bfloat16") float32 activations between library calls may be stored in, when the calls compute
        in it (the model's precision); None: every tensor keeps its dtype (the default)."""
        return None

    def writes_reduced(self, call: DnnCall) -> bool:
        """Whether ``call`` can write its output in `reduced_storage`'s dtype (post-ops still computed in fp32)."""
        return False

    def reads_reduced(self, call: DnnCall, layer: Layer, index: int) -> bool:
        """Whether ``call`` can read input ``index`` of ``layer`` (its anchor, a post-op, or its input scale, whose
        source the call reads as its input) stored in
        `reduced_storage`'s dtype, as the operand type it computes in (True) or at least correctly (a post-op's
        operand). The render then finds the stored dtype with ``KernelContext.stored``."""
        return False

    @abc.abstractmethod
    def render(self, call: DnnCall, forward: KernelContext, prepare: KernelContext) -> DnnCode:
        """The C++ of one call; ``forward``/``prepare`` name the tensors in the two programs."""

    def key(self) -> str:
        """Everything about the module that changes generated code (for the cache key)."""
        return self.name
