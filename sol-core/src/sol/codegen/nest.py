"""The backend-neutral loop-nest model of DFP code.

A kernel is a list of nodes: `Loop` (over a named index with a C extent),
`Stmt` (one line of C, with the comment naming the layer it implements) and
`Emit` (the point where an anchor layer has computed one output element;
clustering replaces it with the fused elementwise epilogue and the stores).

Loops carry *what may be done* with them (``parallel``: iterations write
disjoint outputs; ``vector``: innermost, unit-stride, no loop-carried
dependence; ``reduction``: a scalar accumulated with an associative op) and
the flavour decides *what is done* (OpenMP threads, SIMD pragmas, CUDA
blocks...), by filling in ``pragma``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field


@dataclass
class Stmt:
    code: str
    comment: str = ""
    kind: str = "stmt"


@dataclass
class Emit:
    """Output ``output`` of the anchor layer has value ``value`` at multi-index ``index``.

    In a Cluster with a fused pool (conv -> relu -> avg_pool, see `sol.codegen.cluster`), stage 0 is an
    element of the anchor whose elementwise chain ends in ``into`` (the pool window's buffer, not memory),
    and stage 1 an element of the pool, followed by the pool's own epilogue and stores.
    """

    value: str
    index: tuple[str, ...]
    output: int = 0
    #: where the chain's last value goes instead of being stored (a fused pool reads it from there)
    into: str = ""
    #: 0: a value of the anchor; 1: a value of the cluster's fused pool
    stage: int = 0
    kind: str = "emit"


@dataclass
class Loop:
    var: str
    extent: str
    body: list[Node] = field(default_factory=list)
    start: str = "0"
    step: str = "1"
    parallel: bool = False
    vector: bool = False
    #: (C operator, variables) of the scalar reductions carried by this loop, e.g. ("+", "acc"); several
    #: variables with one operator are comma-separated, as OpenMP's reduction clause lists them ("+", "a, b")
    reduction: tuple[str, str] | None = None
    comment: str = ""
    pragma: str = ""  # filled by the flavour
    kind: str = "loop"


@dataclass
class Block:
    """A scope (``{ ... }``) so kernels can reuse local names."""

    body: list[Node] = field(default_factory=list)
    comment: str = ""
    kind: str = "block"


Node = Stmt | Emit | Loop | Block


#: an innermost loop of at most this many iterations (a constant) is not the one vectorised by `nest_in_order`
SHORT_INNER_LOOP = 4


def nest(variables: Sequence[str], extents: Sequence[str], body: list[Node], *, parallel: int = -1,
         vector_last: bool = True, vector_depth: int | None = None) -> list[Node]:
    """Perfectly nested loops over ``variables``.

    ``parallel``: how many outer loops may be parallel (-1: all but a vectorised last one).
    ``vector_depth``: the loop to vectorise when ``vector_last`` (default: the last); loops inside it stay scalar
    (the compiler unrolls short ones).
    """
    if not variables:
        # a 0-d result: scope the body anyway, so two such kernels in one program can both declare ``acc``
        return [Block(body)]
    count = len(variables)
    if parallel < 0:
        parallel = count - 1 if (vector_last and count > 1) else count
    vector_at = (count - 1 if vector_depth is None else vector_depth) if vector_last else -1
    inner: list[Node] = body
    for depth in reversed(range(count)):
        loop = Loop(variables[depth], extents[depth], inner, parallel=depth < parallel, vector=depth == vector_at)
        inner = [loop]
    return inner


def nest_in_order(variables: Sequence[str], extents: Sequence[str], body: list[Node], order: Sequence[int] | None,
                  **kwargs: object) -> list[Node]:
    """`nest` with the loops in ``order`` (a tensor's memory order), so the innermost loop is unit-stride.

    When that innermost loop is short (channels-last RGB: 3 channels), the loop around it is vectorised instead
    and the short one unrolled inside it: the accesses become groups of 3 consecutive elements, which the
    compiler interleaves with permutes. An NCHW -> NHWC copy of a 224x224 RGB image took 0.040 ms with the
    3-channel loop as the vector loop and 0.005 ms this way (2 threads, AVX-512).
    """
    if order is not None and list(order) != list(range(len(variables))):
        variables, extents = [variables[d] for d in order], [extents[d] for d in order]
    if (kwargs.get("vector_last", True) and "parallel" not in kwargs and len(variables) >= 2
            and _short(extents[-1]) and not _short(extents[-2])):
        count = len(variables)
        return nest(variables, extents, body, parallel=count - 1, vector_depth=count - 2,
                    **kwargs)  # type: ignore[arg-type]
    return nest(variables, extents, body, **kwargs)  # type: ignore[arg-type]


def _short(extent: str) -> bool:
    return extent.isdigit() and int(extent) <= SHORT_INNER_LOOP


def walk(nodes: Sequence[Node]) -> Iterator[Node]:
    for n in nodes:
        yield n
        if isinstance(n, (Loop, Block)):
            yield from walk(n.body)


def replace_emits(nodes: list[Node], expand: Callable[[Emit], list[Node]]) -> list[Node]:
    """The nodes with every `Emit` replaced by ``expand(emit)``."""
    out: list[Node] = []
    for n in nodes:
        if isinstance(n, Emit):
            out.extend(expand(n))
        elif isinstance(n, (Loop, Block)):
            n.body = replace_emits(n.body, expand)
            out.append(n)
        else:
            out.append(n)
    return out


def index_vars(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]
