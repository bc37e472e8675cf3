"""Native ops of PyTorch's VE device (ve_kernels.cpp via native_ops.cpp) on the emulated VE, against PyTorch's CPU.

Every op runs with broadcasting, non-contiguous inputs (views of VE tensors, made on the VE), scalar operands and
its in-place form, over float32, float64, int64, int32 and bool, and must not take the CPU fallback. Float results
are measured against float64 with eager float32's own error as the yardstick; integer and bool results are exact.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

import sol_backend_ve.torch_ve as torch_ve  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool]
FLOATS = [torch.float32, torch.float64]
INTEGERS = [torch.int64, torch.int32]


@pytest.fixture(scope="module", autouse=True)
def ve(torch_ve_device):
    """The emulated VE as PyTorch's VE device (conftest.torch_ve_device)."""
    return torch_ve_device


def make(shape: tuple[int, ...], dtype: torch.dtype, seed: int, *, positive: bool = False,
         nonzero: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if positive:
            x = x.abs() + 0.1
        return x.to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    x = torch.randint(1 if positive else -6, 7, shape, generator=g, dtype=dtype)
    if nonzero:
        x[x == 0] = 3
    return x


class Operand:
    """A CPU tensor and how to view it: applied to the CPU tensor and, on the VE, to its copy there."""

    def __init__(self, base: torch.Tensor, view: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> None:
        self.base, self.view = base, view

    def cpu(self) -> torch.Tensor:
        return self.view(self.base.clone())

    def ve(self) -> torch.Tensor:
        return self.view(self.base.ve())


def layouts(dtype: torch.dtype, seed: int = 0, **kind) -> list[tuple[Operand, Operand]]:
    """Operand pairs: same shape, broadcast, non-contiguous views on both sides, and a 0-d VE tensor."""
    return [
        (Operand(make((3, 5), dtype, seed, **kind)), Operand(make((3, 5), dtype, seed + 1, **kind))),
        (Operand(make((4, 1, 5), dtype, seed, **kind)), Operand(make((3, 5), dtype, seed + 1, **kind))),
        (Operand(make((5, 4, 6), dtype, seed, **kind), lambda t: t.transpose(0, 2)[:, ::2]),
         Operand(make((2, 6, 5), dtype, seed + 1, **kind), lambda t: t[1, ::3])),
        (Operand(make((2, 3), dtype, seed, **kind)), Operand(make((), dtype, seed + 1, **kind))),
    ]


def assert_close_to_cpu(got: torch.Tensor, fn: Callable[..., torch.Tensor], cpu_inputs: list) -> None:
    """``got`` (a VE result) against ``fn`` on the CPU: exact for integers and bool; floats against float64."""
    expected = fn(*cpu_inputs)
    assert got.device.type == "ve"
    got = got.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, expected.dtype, got.shape)
    if not expected.dtype.is_floating_point:
        assert torch.equal(got, expected), (got, expected)
        return
    exact = fn(*[x.double() if isinstance(x, torch.Tensor) and x.dtype.is_floating_point else x
                 for x in cpu_inputs]).to(torch.float64)
    assert torch.equal(got.isnan(), exact.isnan()), (got, exact)
    infinite = exact.isinf()
    assert torch.equal(got.double()[infinite], exact[infinite]), (got, exact)
    finite = exact.isfinite()
    if not bool(finite.any()):
        return
    own = (expected.double() - exact)[finite].abs().max()
    err = (got.double() - exact)[finite].abs().max()
    # rounding differences (fused multiply-add, order) are worth a few ulps of the largest value
    allowed = 2 * own + 2 * torch.finfo(expected.dtype).eps * exact[finite].abs().max()
    assert err <= allowed, f"max error {err} (eager float: {own}, allowed {allowed})"


def run_native(fn: Callable[..., torch.Tensor], *ve_inputs) -> torch.Tensor:
    """``fn`` on VE inputs, asserting that no op took the CPU fallback."""
    before = dict(torch_ve.fallback_counts)
    result = fn(*ve_inputs)
    if isinstance(result, torch.Tensor):
        result.cpu()
    assert torch_ve.fallback_counts == before, f"fell back to the CPU: {torch_ve.fallback_counts}"
    return result


def check(fn: Callable[..., torch.Tensor], *operands) -> None:
    """fn on the VE operands (Operand, or plain numbers) against fn on the CPU ones."""
    ve_inputs = [o.ve() if isinstance(o, Operand) else o for o in operands]
    cpu_inputs = [o.cpu() if isinstance(o, Operand) else o for o in operands]
    assert_close_to_cpu(run_native(fn, *ve_inputs), fn, cpu_inputs)


def check_inplace(method: str, a: Operand, b: Operand | float | int, **kwargs) -> None:
    """a.<method>(b) on a view of a VE tensor: the whole base tensor afterwards matches the CPU's."""
    cpu_base, ve_base = a.base.clone(), a.base.ve()
    cpu_other = b.cpu() if isinstance(b, Operand) else b
    ve_other = b.ve() if isinstance(b, Operand) else b
    expected_view = getattr(a.view(cpu_base), method)(cpu_other, **kwargs)
    got_view = run_native(lambda: getattr(a.view(ve_base), method)(ve_other, **kwargs))
    assert got_view.data_ptr() == a.view(ve_base).data_ptr()  # in place
    assert_close_to_cpu(ve_base, lambda base: base, [cpu_base])
    assert expected_view.shape == got_view.shape


# ---- binary ops ---------------------------------------------------------------------------------------------------

ARITHMETIC = {
    "add": lambda a, b: torch.add(a, b),
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2),
    "sub": lambda a, b: torch.sub(a, b, alpha=3),
    "mul": lambda a, b: a * b,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ARITHMETIC)
def test_arithmetic(name, dtype):
    fn = ARITHMETIC[name]
    if dtype == torch.bool and name == "sub":  # PyTorch rejects it: the VE says the same
        a, b = layouts(dtype)[0]
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
            fn(a.cpu(), b.cpu())
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
            fn(a.ve(), b.ve())
        return
    for a, b in layouts(dtype):
        check(fn, a, b)
        check(fn, b, a)


@pytest.mark.parametrize("dtype", [*FLOATS, *INTEGERS])
def test_division(dtype):
    for a, b in layouts(dtype, nonzero=True):
        check(torch.div, a, b)  # true division: integers give float32
        check(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b)
        check(lambda x, y: torch.div(x, y, rounding_mode="trunc"), a, b)
        check(lambda x: x / 3, a)
        check(lambda x: x // -2, a)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_forms_and_type_promotion(dtype):
    a = Operand(make((4, 6), dtype, 7), lambda t: t[:, 1::2])
    check(lambda x: x + 2, a)
    check(lambda x: x * 2.5, a)  # a float scalar promotes integers to float32
    check(lambda x: 3 - x if dtype != torch.bool else x | True, a)
    check(lambda x: x == 1, a)
    check(lambda x: x > 0.5, a)
    check(lambda x: x + torch.tensor(2), a)  # a CPU scalar tensor takes part on the VE
    other = Operand(make((4, 3), torch.float64 if dtype != torch.float64 else torch.int32, 8))
    check(lambda x, y: x * y, a, other)  # mixed dtypes: PyTorch's promotion
    check(lambda x, y: torch.add(x, y), other, a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(op, dtype):
    fn = getattr(torch, op)
    for a, b in layouts(dtype):
        check(fn, a, b)
        check(lambda x: fn(x, 1), a)
    a, b = layouts(dtype)[0]
    check_inplace(f"{op}_", a, b)  # in place keeps a's dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_logical_and_bitwise(dtype):
    for a, b in layouts(dtype):
        check(torch.logical_and, a, b)
        check(torch.logical_or, a, b)
        check(torch.logical_xor, a, b)
        check(torch.logical_not, a)
        if not dtype.is_floating_point:
            check(torch.bitwise_and, a, b)
            check(lambda x, y: x | y, a, b)
            check(lambda x, y: x ^ y, a, b)
            check(lambda x: ~x, a)


@pytest.mark.parametrize("dtype", [*FLOATS, *INTEGERS])
def test_pow(dtype):
    for a, b in layouts(dtype, positive=True):
        check(torch.pow, a, b)
        check(lambda x: x**2, a)
        check(lambda x: 2**x, a)
        check(lambda x: x**0.5, a)
    if dtype.is_floating_point:
        a = Operand(make((3, 4), dtype, 3, positive=True), lambda t: t.t())
        check(lambda x: x**-1.5, a)
        check_inplace("pow_", a, 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_forms(dtype):
    for a, b in layouts(dtype)[:3]:
        if a.cpu().shape != torch.broadcast_shapes(a.cpu().shape, b.cpu().shape):
            a, b = b, a  # in place: the result has self's shape
        if a.cpu().shape != torch.broadcast_shapes(a.cpu().shape, b.cpu().shape):
            continue
        check_inplace("mul_", a, b)
        check_inplace("logical_and_", a, b)
        if dtype != torch.bool:
            check_inplace("add_", a, b, alpha=2)
            check_inplace("sub_", a, b)
            check_inplace("add_", a, 3)
            check_inplace("clamp_", a, -1)
        if dtype.is_floating_point:
            check_inplace("div_", a, b)
            check_inplace("mul_", a, 0.5)


# ---- unary ops, clamp, where, fill ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_unary(dtype):
    a = Operand(make((6, 5), dtype, 11), lambda t: t.t()[1:])
    positive = Operand(make((6, 5), dtype, 12, positive=True), lambda t: t[::2])
    if dtype != torch.bool:
        check(torch.abs, a)
        check(torch.neg, a)
    check(torch.sqrt, positive)
    check(torch.exp, a)
    check(torch.log, positive)
    if dtype.is_floating_point:
        check(torch.sqrt, a)  # NaN for negative inputs, as on the CPU
        check(torch.reciprocal, positive)
        check(lambda t: torch.ceil(t * 3), a)
        check(lambda t: torch.floor(t * 3), a)
        for method in ("abs_", "neg_", "sqrt_", "exp_", "log_", "reciprocal_", "ceil_", "floor_"):
            base = make((6, 5), dtype, 13, positive=True)
            ve_base, cpu_base = base.ve(), base.clone()
            run_native(lambda m=method, t=ve_base: getattr(t[:, ::2], m)())
            getattr(cpu_base[:, ::2], method)()
            assert_close_to_cpu(ve_base, lambda t: t, [cpu_base])


@pytest.mark.parametrize("dtype", [*FLOATS, *INTEGERS])
def test_clamp(dtype):
    a = Operand(make((5, 6), dtype, 21), lambda t: t[:, ::2])
    check(lambda x: x.clamp(-1, 1), a)
    check(lambda x: x.clamp(min=0), a)
    check(lambda x: x.clamp(max=0), a)
    check(lambda x: x.clamp(-0.5, 2.5), a)  # float bounds: integer inputs give float results
    lo, hi = Operand(make((5, 3), dtype, 22)), Operand(make((3,), dtype, 23))
    check(lambda x, y, z: torch.clamp(x, y, z), a, lo, hi)
    check(lambda x, y: torch.clamp(x, min=y), a, lo)
    check(lambda x, y: torch.clamp(x, max=y), a, hi)
    check(torch.clamp_min, a, hi)
    if dtype.is_floating_point:
        nan = torch.tensor([float("nan"), 2.0, -3.0], dtype=dtype)
        check(lambda x: x.clamp(-1, 1), Operand(nan))


@pytest.mark.parametrize("dtype", DTYPES)
def test_where(dtype):
    for a, b in layouts(dtype):
        shape = torch.broadcast_shapes(a.cpu().shape, b.cpu().shape)
        cond = Operand(make(tuple(reversed(shape)), torch.bool, 31), lambda t: t.permute(*reversed(range(t.dim()))))
        check(torch.where, cond, a, b)
        check(torch.where, Operand(make(shape[-1:], torch.bool, 30)), a, b)
    a = layouts(dtype)[2][0]
    check(lambda c, x: torch.where(c, x, 0), Operand(make((5,), torch.bool, 34)), a)  # a Python number as "other"
    check(lambda c, x: x.masked_fill(c, 1), Operand(make((4, 3), torch.bool, 32)), Operand(make((4, 3), dtype, 33)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_zero_copy(dtype):
    base = make((4, 6), dtype, 41)
    ve_base, cpu_base = base.ve(), base.clone()
    run_native(lambda: ve_base[:, 1::2].fill_(1))
    cpu_base[:, 1::2].fill_(1)
    run_native(lambda: ve_base[2].zero_())
    cpu_base[2].zero_()
    assert torch.equal(ve_base.cpu(), cpu_base)
    for other in DTYPES:  # VE -> VE with dtype conversion, broadcast and strides on both sides
        src = make((6,), other, 42)
        ve_dst, cpu_dst = make((6, 4), dtype, 43).ve(), make((6, 4), dtype, 43)
        run_native(lambda s=src, d=ve_dst: d.t().copy_(s.ve()))
        cpu_dst.t().copy_(src)
        assert torch.equal(ve_dst.cpu(), cpu_dst)
    dst, expected = torch.zeros(6, 4, dtype=dtype, device="ve"), torch.zeros(6, 4, dtype=dtype)
    torch_ve.reset_copy_counters()
    src = make((2, 6), dtype, 44).t()
    dst[:, ::2] = src  # CPU -> strided VE: one upload, no read-back
    expected[:, ::2] = src
    assert torch_ve.copy_counters()["to_cpu_copies"] == 0 and torch_ve.copy_counters()["to_ve_copies"] == 1
    assert torch.equal(dst.t()[1:].cpu(), expected.t()[1:])  # strided VE -> CPU: packed on the VE first
    assert torch_ve.copy_counters()["to_cpu_copies"] == 1


# ---- lerp, addcmul, addcdiv -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_pointwise_optimizer_ops(dtype):
    for a, b in layouts(dtype)[:3]:
        c = Operand(make((5,), dtype, 51, positive=True))
        check(lambda x, y: torch.lerp(x, y, 0.3), a, b)
        check(lambda x, y: torch.lerp(x, y, 0.8), a, b)
        check(lambda x, y, z: torch.lerp(x, y, z), a, b, c)
        check(lambda x, y, z: torch.addcmul(x, y, z, value=-0.5), a, b, c)
        check(lambda x, y, z: torch.addcdiv(x, y, z, value=0.25), a, b, c)
    a = Operand(make((3, 5), dtype, 52))
    b, c = Operand(make((5,), dtype, 53)), Operand(make((3, 1), dtype, 54, positive=True))
    check(lambda x, y, z: x.clone().addcmul_(y, z, value=2), a, b, c)
    check(lambda x, y, z: x.clone().addcdiv_(y, z, value=-1), a, b, c)
    check(lambda x, y: x.clone().lerp_(y, 0.1), a, b)


# ---- reductions and cat -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions(dtype):
    a = Operand(make((4, 5, 6), dtype, 61), lambda t: t.transpose(0, 2)[::2])  # (3, 5, 4), non-contiguous
    for dims in (None, 0, -1, (0, 2), (1,)):
        for keepdim in (False, True):
            args = {} if dims is None else {"dim": dims, "keepdim": keepdim}
            check(lambda x, kw=args: torch.sum(x, **kw), a)
            if dtype.is_floating_point:
                check(lambda x, kw=args: torch.mean(x, **kw), a)
            if dims is not None and dtype != torch.bool:
                check(lambda x, kw=args: torch.amax(x, **kw), a)
                check(lambda x, kw=args: torch.amin(x, **kw), a)
    check(lambda x: x.sum(dtype=torch.float64), a)
    if dtype != torch.bool:
        check(torch.min, a)
        check(torch.max, a)
        for dim in (0, 1, -1):
            check(lambda x, d=dim: torch.max(x, d).values, a)
            check(lambda x, d=dim: torch.max(x, d, keepdim=True).indices, a)
            check(lambda x, d=dim: torch.min(x, d).values, a)
            check(lambda x, d=dim: torch.min(x, d).indices, a)


def test_reductions_propagate_nan_and_handle_empty():
    x = torch.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, -6.0]])
    for fn in (torch.max, torch.min, lambda t: t.max(1).values, lambda t: t.max(1).indices, lambda t: t.sum(1),
               lambda t: t.amin(0)):
        check(fn, Operand(x))
    empty = Operand(torch.zeros(0, 3))
    check(lambda t: t.sum(0), empty)
    check(lambda t: t.mean(0), empty)
    with pytest.raises(RuntimeError, match="numel"):
        torch.max(torch.zeros(0).ve())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_full_sums_of_large_tensors(dtype):
    """Above 65536 elements a full sum or mean is split over the cores (partial sums added in thread order)."""
    a = Operand(make((400, 300), dtype, 65), lambda t: t.t()[:, 1:])  # non-contiguous, 119,600 elements
    check(torch.sum, a)
    check(lambda t: t.sum(dim=(0, 1), keepdim=True), a)
    if dtype.is_floating_point:
        check(torch.mean, a)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat(dtype):
    a = Operand(make((2, 3, 4), dtype, 71))
    b = Operand(make((4, 3, 2), dtype, 72), lambda t: t.transpose(0, 2))  # (2, 3, 4), non-contiguous
    c = Operand(make((2, 5, 4), dtype, 73), lambda t: t[:, ::2])  # (2, 3, 4)
    for dim in (0, 1, -1):
        check(lambda x, y, z, d=dim: torch.cat([x, y, z], d), a, b, c)
    check(lambda x: torch.cat([x, torch.empty(0, dtype=x.dtype, device=x.device)]), a)  # legacy empty 1-d: skipped
    other = Operand(make((2, 3, 4), torch.float64, 74))
    check(lambda x, y: torch.cat([x, y], 1), a, other)  # promoted to the common dtype
    check(lambda x, y: torch.stack([x, y]), a, b)


# ---- the optimizers -----------------------------------------------------------------------------------------------

OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"lr": 0.1}),
    "sgd-momentum-wd": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
    "sgd-nesterov": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "dampening": 0}),
    "adam": (torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.01}),
    "adam-amsgrad": (torch.optim.Adam, {"lr": 0.01, "amsgrad": True}),
}


@pytest.mark.parametrize("foreach", [False, True], ids=["foreach-off", "foreach-on"])
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_steps_match_cpu(name, foreach):
    cls, options = OPTIMIZERS[name]
    shapes = [(4, 3), (3,), (2, 2, 2)]
    start = [make(s, torch.float32, 80 + i) for i, s in enumerate(shapes)]
    cpu_params = [torch.nn.Parameter(t.clone()) for t in start]
    ve_params = [torch.nn.Parameter(t.ve()) for t in start]
    cpu_opt = cls(cpu_params, foreach=foreach, **options)
    ve_opt = cls(ve_params, foreach=foreach, **options)
    for step in range(3):
        grads = [make(s, torch.float32, 90 + 10 * step + i) for i, s in enumerate(shapes)]
        for p, g in zip(cpu_params, grads, strict=True):
            p.grad = g.clone()
        for p, g in zip(ve_params, grads, strict=True):
            p.grad = g.ve()
        cpu_opt.step()
        run_native(ve_opt.step)
    for got, expected in zip(ve_params, cpu_params, strict=True):
        assert got.device.type == "ve"
        torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=2e-6, atol=2e-7)
    for key, value in cpu_opt.state[cpu_params[0]].items():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            torch.testing.assert_close(ve_opt.state[ve_params[0]][key].cpu(), value, rtol=2e-6, atol=2e-7)


# ---- dtypes without kernels, printing -------------------------------------------------------------------------------


def test_unsupported_dtype_takes_the_fallback_once():
    x = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    v = x.ve()
    assert v.dtype == torch.float16
    with pytest.warns(UserWarning, match=r"aten::mul\.out has no VE kernel"):
        got = v * v
    torch.testing.assert_close(got.cpu(), x * x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per op
        torch.testing.assert_close((v * 2).cpu(), x * 2)


def test_printing():
    x = torch.tensor([[1.5, -2.0], [3.25, 4.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the formatter's masked_select/ceil take the fallback
        text = repr(x.ve())
    assert text == repr(x)[:-1] + ", device='ve:0')"
    assert str(torch.tensor([True, False]).ve()) == "tensor([ True, False], device='ve:0')"


# ---- the kernel library builds for a real VE --------------------------------------------------------------------


def test_kernel_library_is_freestanding_and_compiles_for_the_ve(tmp_path):
    """ve_kernels.cpp includes only its descriptor header and builds with LLVM's VE target (no VE libc headers)."""
    import re
    import shutil
    import struct

    from sol_backend_ve import toolchain
    from sol_backend_ve.torch_ve import kernels

    source, header = kernels.SOURCES
    includes = re.findall(r'^\s*#\s*include\s*(\S+)', source.read_text() + header.read_text(), re.MULTILINE)
    assert includes == ['"ve_kernels.h"'], includes
    if shutil.which(toolchain.CLANG) is None:  # .ci/run installs it, as for test_flavour's VE builds
        pytest.skip(f"{toolchain.CLANG} (LLVM's VE target) is not installed: apt-get install {toolchain.CLANG}")
    (obj,) = toolchain.compile_objects(source, tmp_path, ("-fno-exceptions", f"-I{source.parent}"))
    data = obj.read_bytes()
    assert data[:4] == b"\x7fELF" and struct.unpack_from("<H", data, 18)[0] == 251  # EM_VE
    symbols = data.decode("latin-1")
    for name in ("sol_ve_elementwise_kernel", "sol_ve_reduction_kernel", "sol_ve_kernels_abi"):
        assert name in symbols
