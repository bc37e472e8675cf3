"""Each op's numpy reference (and shape rule) against PyTorch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import sympy
from sol.ir import BATCH, Dim, Purpose, TensorType, all_ops, get_op

torch = pytest.importorskip("torch", reason="the references are checked against PyTorch")
F = torch.nn.functional

rng = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def check(name: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any], expected: Callable[..., Any],
          rtol: float = 1e-5, atol: float = 1e-5) -> None:
    opdef = get_op(name)
    results = opdef.reference(list(inputs), attrs)
    want = expected(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    types = opdef.infer([TensorType(tuple(Dim(s) for s in x.shape), str(x.dtype)) for x in inputs], attrs)
    assert len(results) == len(want) == len(types)
    for got, ref, tt in zip(results, want, types, strict=True):
        ref = ref.numpy()
        assert got.shape == ref.shape, name
        assert tuple(tt.shape) == ref.shape, f"{name}: shape rule says {tt.shape}, torch {ref.shape}"
        assert str(got.dtype) == tt.dtype == str(ref.dtype), name
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=name)


CONVS = [
    # spatial, x shape, w shape, stride, padding, dilation, groups
    (2, (2, 4, 9, 11), (6, 4, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    (2, (1, 6, 12, 12), (6, 2, 3, 5), (2, 1), ((0, 1), (2, 2)), (1, 2), 3),
    (2, (1, 8, 10, 10), (8, 1, 3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 8),
    (1, (2, 3, 20), (5, 3, 4), (3,), ((2, 2),), (1,), 1),
    (3, (1, 2, 6, 7, 8), (4, 2, 3, 3, 3), (1, 2, 1), ((1, 1), (0, 0), (1, 1)), (1, 1, 2), 1),
]


@pytest.mark.parametrize("case", CONVS)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(case: tuple[Any, ...], bias: bool) -> None:
    spatial, xs, ws, stride, padding, dilation, groups = case
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
    inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
    symmetric = all(b == e for b, e in padding)

    def expected(x: Any, w: Any, b: Any = None) -> Any:
        if symmetric:
            return fn(x, w, b, stride, tuple(p for p, _ in padding), dilation, groups)
        flat = [v for pair in reversed(padding) for v in pair]
        return fn(F.pad(x, flat), w, b, stride, 0, dilation, groups)

    check("conv", inputs, {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}, expected, rtol=1e-4)


@pytest.mark.parametrize("groups,stride,padding,opad,dilation", [(1, (2, 2), (1, 1), (1, 0), (1, 1)), (2, (1, 3), (0, 2), (0, 2), (2, 1))])
def test_conv_transpose(groups: int, stride: tuple[int, int], padding: tuple[int, int], opad: tuple[int, int], dilation: tuple[int, int]) -> None:
    inputs = [rand(2, 4, 5, 6), rand(4, 3, 3, 4), rand(3 * groups)]
    attrs = {"stride": stride, "padding": padding, "output_padding": opad, "dilation": dilation, "groups": groups}
    check("conv_transpose", inputs, attrs,
          lambda x, w, b: F.conv_transpose2d(x, w, b, stride, padding, opad, groups, dilation), rtol=1e-4)


def test_linear_and_matmul() -> None:
    check("linear", [rand(2, 3, 8), rand(5, 8), rand(5)], {}, F.linear, rtol=1e-4)
    check("linear", [rand(4, 8), rand(5, 8)], {}, F.linear, rtol=1e-4)
    check("matmul", [rand(2, 3, 4, 5), rand(3, 5, 6)], {}, torch.matmul, rtol=1e-4)
    check("matmul", [rand(4, 5), rand(5)], {}, torch.matmul, rtol=1e-4)
    check("matmul", [rand(2, 3, 4, 5), rand(3, 6, 5)], {"transpose_b": True},
          lambda a, b: torch.matmul(a, b.transpose(-1, -2)), rtol=1e-4)


UNARY: list[tuple[str, dict[str, Any], Callable[[Any], Any]]] = [
    ("relu", {}, torch.relu),
    ("leaky_relu", {"negative_slope": 0.2}, lambda x: F.leaky_relu(x, 0.2)),
    ("clamp", {"min": 0.0, "max": 6.0}, F.relu6),
    ("clamp", {"min": None, "max": 0.5}, lambda x: torch.clamp(x, max=0.5)),
    ("gelu", {"approximate": "none"}, F.gelu),
    ("gelu", {"approximate": "tanh"}, lambda x: F.gelu(x, approximate="tanh")),
    ("silu", {}, F.silu),
    ("sigmoid", {}, torch.sigmoid),
    ("tanh", {}, torch.tanh),
    ("hardswish", {}, F.hardswish),
    ("hardsigmoid", {}, F.hardsigmoid),
    ("elu", {"alpha": 0.7}, lambda x: F.elu(x, 0.7)),
    ("softplus", {"beta": 2.0, "threshold": 1.0}, lambda x: F.softplus(x, 2.0, 1.0)),
    ("exp", {}, torch.exp),
    ("log", {}, lambda x: torch.log(x.abs() + 0.1)),
    ("sqrt", {}, lambda x: torch.sqrt(x.abs())),
    ("rsqrt", {}, lambda x: torch.rsqrt(x.abs() + 0.1)),
    ("neg", {}, torch.neg),
    ("abs", {}, torch.abs),
    ("erf", {}, torch.erf),
    ("reciprocal", {}, lambda x: torch.reciprocal(x.abs() + 0.1)),
    ("identity", {}, lambda x: x),
    ("dropout", {"p": 0.5}, lambda x: F.dropout(x, 0.5, training=False)),
    ("stochastic_depth", {"p": 0.2, "mode": "row"}, lambda x: x),
    ("contiguous", {}, lambda x: x.contiguous()),
]
_PREPARE = {"log": lambda x: np.abs(x) + np.float32(0.1), "sqrt": np.abs, "rsqrt": lambda x: np.abs(x) + np.float32(0.1),
            "reciprocal": lambda x: np.abs(x) + np.float32(0.1)}


@pytest.mark.parametrize("name,attrs,fn", UNARY, ids=[f"{u[0]}-{i}" for i, u in enumerate(UNARY)])
def test_unary(name: str, attrs: dict[str, Any], fn: Callable[[Any], Any]) -> None:
    x = rand(3, 4, 5) * 3
    prepared = _PREPARE.get(name, lambda v: v)(x).astype(np.float32)
    check(name, [prepared], attrs, lambda _: fn(torch.from_numpy(x)))
    assert get_op(name).elementwise


def test_cast() -> None:
    check("cast", [rand(4) * 10], {"dtype": "int64"}, lambda x: x.to(torch.int64))


BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
          "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcasting(name: str) -> None:
    a, b = rand(2, 3, 4), rand(3, 1)
    b[0, 0] = a[0, 0, 0]  # so eq/le/ge see equal values
    check(name, [a, b], {}, BINARY[name])


def test_scalar_const_does_not_widen() -> None:
    # A Python scalar becomes a 0-d float64 const; PyTorch keeps the float32 tensor's dtype.
    check("mul", [rand(3, 4), np.array(0.5)], {}, lambda a, b: a * 0.5)
    check("pow", [np.abs(rand(3, 4)), np.array(2.0)], {}, lambda a, b: a ** 2.0)
    check("div", [np.arange(6).reshape(2, 3), np.array(4)], {}, lambda a, b: a / 4)
    check("div", [np.arange(6).reshape(2, 3) - 3, np.array(4)], {"rounding_mode": "floor"}, lambda a, b: torch.div(a, 4, rounding_mode="floor"))


def test_where() -> None:
    check("where", [rand(3, 4) > 0, rand(3, 4), rand(4)], {}, torch.where)


def test_normalization() -> None:
    x = rand(2, 6, 5, 4)
    mean, var, w, b = rand(6), np.abs(rand(6)) + 0.5, rand(6), rand(6)
    check("batch_norm", [x, mean, var, w, b], {"eps": 1e-3},
          lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False, eps=1e-3))
    check("batch_norm", [x, mean, var], {"eps": 1e-5}, lambda x, m, v: F.batch_norm(x, m, v, training=False))
    check("layer_norm", [x, rand(5, 4), rand(5, 4)], {"normalized_ndim": 2, "eps": 1e-5},
          lambda x, w, b: F.layer_norm(x, (5, 4), w, b))
    check("layer_norm", [x], {"normalized_ndim": 1, "eps": 1e-6}, lambda x: F.layer_norm(x, (4,), eps=1e-6))
    check("group_norm", [x, w, b], {"num_groups": 3, "eps": 1e-5}, lambda x, w, b: F.group_norm(x, 3, w, b))


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool(ceil_mode: bool) -> None:
    x = rand(2, 3, 13, 10)
    check("max_pool", [x], {"kernel": (3, 2), "stride": (2, 2), "padding": (1, 0), "dilation": (1, 2), "ceil_mode": ceil_mode},
          lambda x: F.max_pool2d(x, (3, 2), (2, 2), (1, 0), (1, 2), ceil_mode))
    check("max_pool", [x[0]], {"kernel": (3,), "stride": (2,), "padding": (1,), "dilation": (1,), "ceil_mode": ceil_mode},
          lambda x: F.max_pool1d(x, 3, 2, 1, 1, ceil_mode))


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("divisor_override", [None, 5])
def test_avg_pool(ceil_mode: bool, count_include_pad: bool, divisor_override: int | None) -> None:
    x = rand(2, 3, 12, 9)
    attrs = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "ceil_mode": ceil_mode,
             "count_include_pad": count_include_pad, "divisor_override": divisor_override}
    check("avg_pool", [x], attrs, lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode, count_include_pad, divisor_override))


def test_adaptive_pools() -> None:
    x = rand(2, 3, 13, 10)
    check("adaptive_avg_pool", [x], {"output_size": (5, 3)}, lambda x: F.adaptive_avg_pool2d(x, (5, 3)))
    check("adaptive_avg_pool", [x], {"output_size": (1, 1)}, lambda x: F.adaptive_avg_pool2d(x, 1))
    check("adaptive_max_pool", [x], {"output_size": (4, None)}, lambda x: F.adaptive_max_pool2d(x, (4, None)))


def test_softmax_and_reductions() -> None:
    x = rand(2, 3, 4)
    check("softmax", [x], {"axis": -1}, lambda x: torch.softmax(x, -1))
    check("log_softmax", [x], {"axis": 1}, lambda x: torch.log_softmax(x, 1))
    check("reduce_mean", [x], {"axes": (1, 2), "keepdims": True}, lambda x: x.mean((1, 2), keepdim=True))
    check("reduce_sum", [x], {"axes": (0,), "keepdims": False}, lambda x: x.sum(0))
    check("reduce_max", [x], {"axes": (-1,), "keepdims": False}, lambda x: x.amax(-1))


def test_shape_ops() -> None:
    x = rand(2, 3, 4)
    check("reshape", [x], {"shape": (6, 4)}, lambda x: x.reshape(6, 4))
    check("permute", [x], {"perm": (2, 0, 1)}, lambda x: x.permute(2, 0, 1))
    check("concat", [x, rand(2, 1, 4), rand(2, 2, 4)], {"axis": 1}, lambda *t: torch.cat(t, 1))
    check("split", [x], {"axis": 2, "sizes": (1, 3)}, lambda x: torch.split(x, [1, 3], 2))
    check("slice", [x], {"axis": 2, "start": 1, "stop": 4, "step": 2}, lambda x: x[:, :, 1:4:2])
    check("expand", [rand(3, 1)], {"shape": (2, 3, 5)}, lambda x: x.expand(2, 3, 5))
    for mode in ("constant", "reflect", "replicate", "circular"):
        check("pad", [x], {"pads": ((0, 0), (1, 2), (2, 1)), "mode": mode, "value": 0.5},
              lambda x, m=mode: F.pad(x, (2, 1, 1, 2), mode=m, value=0.5) if m == "constant" else F.pad(x[None], (2, 1, 1, 2), mode=m)[0])


def test_misc_ops() -> None:
    check("embedding", [np.array([[1, 0, 3]]), rand(5, 4)], {}, lambda i, w: F.embedding(i, w))
    check("channel_shuffle", [rand(2, 6, 3, 3)], {"groups": 3}, lambda x: F.channel_shuffle(x, 3))


def test_indexing_ops() -> None:
    x = rand(3, 5, 4)
    index = np.array([[[4, 0], [1, 1]], [[0, 2], [3, 4]]])  # smaller than x in dims 0 and 2: torch.gather's rule
    check("gather_elements", [x, index], {"axis": 1}, lambda x, i: torch.gather(x, 1, i))
    check("gather", [x, np.array([2, 0, 2])], {"axis": 1}, lambda x, i: torch.index_select(x, 1, i))
    check("gather", [x, np.array([[1, -1]])], {"axis": 2}, lambda x, i: x[:, :, i])
    ints = rng.integers(-3, 4, (2, 5)).astype(np.int64)
    check("cumsum", [ints], {"axis": 1}, lambda x: torch.cumsum(x, 1))
    check("cumsum", [x], {"axis": 0, "reverse": True}, lambda x: torch.flip(torch.cumsum(torch.flip(x, [0]), 0), [0]))
    check("cumprod", [x], {"axis": 2}, lambda x: torch.cumprod(x, 2))
    flags = rng.integers(0, 2, (2, 3)).astype(bool)
    check("bitwise_not", [flags], {}, lambda x: ~x)
    check("bitwise_not", [ints], {}, lambda x: ~x)
    check("bitwise_and", [flags, flags[:1]], {}, lambda a, b: a & b)
    check("bitwise_or", [ints, ints[:, :1]], {}, lambda a, b: a | b)


@pytest.mark.parametrize("is_causal", [False, True])
def test_attention(is_causal: bool) -> None:
    q, k, v = rand(2, 3, 5, 8), rand(2, 3, 5, 8), rand(2, 3, 5, 4)
    check("attention", [q, k, v], {"scale": None, "is_causal": is_causal},
          lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=is_causal))
    mask = rand(5, 5) > -1.0
    check("attention", [q, k, v, mask], {"scale": 0.3, "is_causal": False},
          lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3))


def test_symbolic_shape_rules() -> None:
    x = TensorType((Dim(BATCH, Purpose.N), Dim(3, Purpose.C), Dim(224, Purpose.P), Dim(224, Purpose.P)))
    conv = get_op("conv").infer([x, TensorType((Dim(8), Dim(3), Dim(7), Dim(7)))],
                                {"stride": (2, 2), "padding": ((3, 3), (3, 3)), "dilation": (1, 1), "groups": 1})[0]
    assert conv.shape == (BATCH, 8, 112, 112)
    assert conv.dims[0].purpose is Purpose.N
    pool = get_op("max_pool").infer([conv], {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": True})[0]
    assert pool.shape == (BATCH, 8, 57, 57)  # ceil((112 + 2 - 3) / 2) + 1, as PyTorch
    flat = get_op("reshape").infer([pool], {"shape": (BATCH, 8 * 57 * 57)})[0]
    assert flat.shape == (BATCH, 8 * 57 * 57)
    seq = TensorType((Dim(BATCH, Purpose.N), Dim(2 * BATCH + 1, Purpose.S)))
    sliced = get_op("slice").infer([seq], {"axis": 1, "start": 1, "stop": 2 * BATCH + 1, "step": 2})[0]
    assert sympy.simplify(sliced.shape[1] - BATCH) == 0


def test_every_op_has_a_docstring_and_reference() -> None:
    for name, opdef in all_ops().items():
        assert opdef.doc, f"op {name} has no docstring"
        assert opdef.module in ("DNN", "DFP")
