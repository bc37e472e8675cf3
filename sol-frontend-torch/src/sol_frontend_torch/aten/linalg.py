"""Linear-algebra aten ops as compositions of SOL ops: einsum (as the batched matrix products it is) and vector norms.

einsum contracts its operands pairwise, left to right. Each pair is brought into the form matmul takes:
the left operand permuted to (batch dims, its own dims, contracted dims), the right one to (batch dims, contracted
dims, its own dims), both reshaped to 3-d, one `matmul`, and the result reshaped and permuted to the labels kept.
Labels only one operand has and nobody needs later are summed out first. So an attention einsum is one batched
GEMM, with the library's kernel where the device has one.
"""

from __future__ import annotations

import math
from typing import Any

from sol.errors import SolUnsupportedError
from sol.ir import Size, Tensor, as_size

from ._registry import Context, aten, axis


def _product(sizes: list[Size]) -> Size:
    total: Size = 1
    for s in sizes:
        total = as_size(total * s)
    return total


class _Term:
    """A tensor with one label per dim."""

    def __init__(self, tensor: Tensor, labels: str) -> None:
        self.tensor, self.labels = tensor, labels

    def size(self, label: str) -> Size:
        return self.tensor.shape[self.labels.index(label)]


def _arrange(cx: Context, term: _Term, order: str) -> Tensor:
    perm = tuple(term.labels.index(c) for c in order)
    return term.tensor if perm == tuple(range(len(perm))) else cx.one("permute", [term.tensor], {"perm": perm})


def _sum_out(cx: Context, term: _Term, keep: set[str]) -> _Term:
    """Sum over the labels no one needs any more (before the product: less work)."""
    gone = tuple(i for i, c in enumerate(term.labels) if c not in keep)
    if not gone:
        return term
    summed = cx.one("reduce_sum", [term.tensor], {"axes": gone, "keepdims": False})
    return _Term(summed, "".join(c for c in term.labels if c in keep))


def _broadcast(cx: Context, term: _Term, label: str, size: Size) -> _Term:
    shape = tuple(size if c == label else term.size(c) for c in term.labels)
    return _Term(cx.one("expand", [term.tensor], {"shape": shape}), term.labels)


def _contract(cx: Context, a: _Term, b: _Term, keep: set[str]) -> _Term:
    """a * b summed over their shared labels that ``keep`` lacks: one batched matmul."""
    a, b = _sum_out(cx, a, keep | set(b.labels)), _sum_out(cx, b, keep | set(a.labels))
    batch = "".join(c for c in a.labels if c in b.labels and c in keep)
    summed = "".join(c for c in a.labels if c in b.labels and c not in keep)
    left = "".join(c for c in a.labels if c not in b.labels)
    right = "".join(c for c in b.labels if c not in a.labels)
    for c in batch + summed:  # a size-1 label broadcasts against the other operand's
        if a.size(c) == 1 and b.size(c) != 1:
            a = _broadcast(cx, a, c, b.size(c))
        elif b.size(c) == 1 and a.size(c) != 1:
            b = _broadcast(cx, b, c, a.size(c))
        elif as_size(a.size(c) - b.size(c)) != 0:
            raise SolUnsupportedError(f"einsum: label {c!r} has sizes {a.size(c)} and {b.size(c)}")
    sizes = {c: a.size(c) for c in a.labels} | {c: b.size(c) for c in b.labels}
    lhs = cx.one("reshape", [_arrange(cx, a, batch + left + summed)],
                 {"shape": (_product([sizes[c] for c in batch]), _product([sizes[c] for c in left]),
                            _product([sizes[c] for c in summed]))})
    rhs = cx.one("reshape", [_arrange(cx, b, batch + summed + right)],
                 {"shape": (_product([sizes[c] for c in batch]), _product([sizes[c] for c in summed]),
                            _product([sizes[c] for c in right]))})
    product = cx.one("matmul", [lhs, rhs])
    labels = batch + left + right
    return _Term(cx.one("reshape", [product], {"shape": tuple(sizes[c] for c in labels)}), labels)


def _parse(equation: str, operands: list[Tensor]) -> tuple[list[str], str]:
    """Input label strings (ellipses expanded to fresh labels) and the output's (implicit output: sorted singletons)."""
    equation = equation.replace(" ", "")
    inputs_part, arrow, output = equation.partition("->")
    specs = inputs_part.split(",")
    if len(specs) != len(operands):
        raise SolUnsupportedError(f"einsum {equation!r}: {len(specs)} operand labels for {len(operands)} tensors")
    used = set(equation)
    fresh = iter(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used)
    ellipsis_rank = max((t.rank - len(s.replace("...", "")) for s, t in zip(specs, operands, strict=True) if "..." in s),
                        default=0)
    ellipsis = "".join(next(fresh) for _ in range(ellipsis_rank))
    labels = []
    for spec, t in zip(specs, operands, strict=True):
        if "..." in spec:
            own = t.rank - len(spec.replace("...", ""))
            spec = spec.replace("...", ellipsis[ellipsis_rank - own:])
        if len(spec) != t.rank:
            raise SolUnsupportedError(f"einsum {equation!r}: labels {spec!r} for a tensor of rank {t.rank}")
        if len(set(spec)) != len(spec):
            raise SolUnsupportedError(f"einsum {equation!r}: a label repeated within one operand (a diagonal) is not "
                                      "supported")
        labels.append(spec)
    if arrow:
        output = output.replace("...", ellipsis)
    else:
        counts = {c: sum(s.count(c) for s in labels) for c in set("".join(labels))}
        output = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ellipsis))
    return labels, output


@aten("einsum")
def einsum(cx: Context, equation: str, operands: list[Tensor], *_: Any, **__: Any) -> Tensor:
    labels, output = _parse(equation, list(operands))
    terms = [_Term(t, s) for t, s in zip(operands, labels, strict=True)]
    result = _sum_out(cx, terms[0], set(output).union(*[set(t.labels) for t in terms[1:]]))
    for k in range(1, len(terms)):
        later = set(output).union(*[set(t.labels) for t in terms[k + 1:]])
        result = _contract(cx, result, terms[k], later)
    result = _sum_out(cx, result, set(output))
    out = _arrange(cx, result, output)
    shape = cx.meta_shape()
    if tuple(out.shape) != tuple(shape):  # size-1 labels broadcast against the other operand's
        out = cx.one("expand", [out], {"shape": shape})
    return out


def vector_norm(cx: Context, x: Tensor, order: float, dims: tuple[int, ...], keepdim: bool) -> Tensor:
    """The p-norm over ``dims``: max|x| (inf), min|x| (-inf), the count of non-zeros (0), (sum |x|^p)^(1/p)."""
    attrs = {"axes": dims, "keepdims": bool(keepdim)}
    if order == 2:
        return cx.one("sqrt", [cx.one("reduce_sum", [cx.one("mul", [x, x])], attrs)])
    magnitude = cx.one("abs", [x])
    if order == math.inf:
        return cx.one("reduce_max", [magnitude], attrs)
    if order == -math.inf:
        return cx.one("reduce_min", [magnitude], attrs)
    if order == 0:
        nonzero = cx.one("cast", [cx.one("ne", [x, cx.const(0.0)])], {"dtype": x.dtype})
        return cx.one("reduce_sum", [nonzero], attrs)
    if order == 1:
        return cx.one("reduce_sum", [magnitude], attrs)
    powered = cx.one("reduce_sum", [cx.one("pow", [magnitude, cx.const(float(order))])], attrs)
    return cx.one("pow", [powered, cx.const(1.0 / float(order))])


def _norm_dims(x: Tensor, dim: Any) -> tuple[int, ...]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(x.rank))
    return tuple(sorted(axis(d, x.rank) for d in (dim if isinstance(dim, (list, tuple)) else [dim])))


@aten("linalg_vector_norm")
def linalg_vector_norm(cx: Context, x: Tensor, ord: float = 2, dim: Any = None, keepdim: bool = False, *,
                       dtype: Any = None) -> Tensor:
    if not x.dtype.startswith(("float", "bfloat")):
        raise SolUnsupportedError(f"vector norm of a {x.dtype} tensor is not supported")
    return vector_norm(cx, x, float(ord), _norm_dims(x, dim), keepdim)


@aten("norm")
def norm(cx: Context, x: Tensor, p: Any = 2, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    if isinstance(p, str):
        if p != "fro":
            raise SolUnsupportedError(f"norm with p={p!r} is not supported; use 'fro' or a number")
        p = 2
    return linalg_vector_norm(cx, x, 2 if p is None else p, dim, keepdim)


@aten("meshgrid")
def meshgrid(cx: Context, tensors: list[Tensor], *, indexing: str = "ij") -> list[Tensor]:
    """Each 1-d input reshaped to its own axis and broadcast to the grid ('xy' swaps the first two axes)."""
    sizes = [t.shape[0] if t.rank == 1 else 1 for t in tensors]
    axes = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        axes[0], axes[1] = 1, 0
    grid = [0] * len(tensors)
    for k, a in enumerate(axes):
        grid[a] = sizes[k]
    out = []
    for k, t in enumerate(tensors):
        shape = [1] * len(tensors)
        shape[axes[k]] = sizes[k]
        y = cx.one("reshape", [t], {"shape": tuple(shape)})
        out.append(cx.one("expand", [y], {"shape": tuple(grid)}))
    return out
