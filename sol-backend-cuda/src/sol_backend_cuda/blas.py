"""Linear, MatMul/BMM and the linear weight gradient as cuBLAS calls: the host-side plan of each call.

cuBLAS is column-major and SOL's tensors are row-major. A row-major ``[R, C]``
matrix is the column-major ``[C, R]`` one (its transpose) with leading
dimension ``C``, so every product is planned as the product of transposes:
``Y = X W^T`` (Linear, ``Y [M, O]``) is ``Y^T = W X^T``, i.e. a column-major
``C [O, M] = op(A) B`` with ``A`` the stored ``W`` read transposed. The plan
(`GemmPlan`) holds exactly the arguments of ``cublasSgemmStridedBatched`` /
``cublasLtMatmul``, with sizes as SOL sizes (ints or expressions of the batch
``N``); `GemmPlan.emulate` runs it with numpy, which is how the tests prove
the arguments right without a GPU.

fp32 only, computed in fp32 (``CUBLAS_COMPUTE_32F``: no TF32), like eager
PyTorch with ``allow_tf32`` off. Only broadcasts that a strided batch
expresses are planned (a whole operand shared by every product, stride 0);
other MatMuls stay generated code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sol.ir import Layer, Size

#: what a Linear's bias and activation can become in cuBLASLt's epilogue (op -> cublasLtEpilogue_t)
EPILOGUES = {None: "CUBLASLT_EPILOGUE_BIAS", "relu": "CUBLASLT_EPILOGUE_RELU_BIAS"}


@dataclass(frozen=True)
class GemmPlan:
    """``C = op(A) op(B)`` column-major, ``batch`` times with element strides; ``a``/``b``/``c`` name the operands
    (which layer input, or "out")."""

    trans_a: bool
    trans_b: bool
    m: Size
    n: Size
    k: Size
    a: str
    lda: Size
    stride_a: Size
    b: str
    ldb: Size
    stride_b: Size
    c: str
    ldc: Size
    stride_c: Size
    batch: Size = 1
    #: a bias of length m added to every column (cuBLASLt's bias epilogue), and the activation after it
    bias: str | None = None
    activation: str | None = None

    def emulate(self, operands: dict[str, np.ndarray]) -> np.ndarray:
        """The result cuBLAS computes with these arguments (float64), read back as the row-major output's values.

        Why: the plan is the part that cannot be checked without a GPU; numpy reads the same memory the same way.
        """
        m, n, k, batch = (int(v) for v in (self.m, self.n, self.k, self.batch))
        flat_a, flat_b = (np.asarray(operands[name], np.float64).reshape(-1) for name in (self.a, self.b))
        out = np.zeros(int(self.stride_c) * (batch - 1) + int(self.ldc) * (n - 1) + m)
        for i in range(batch):
            op_a = _column_major(flat_a, int(self.stride_a) * i, *(k, m) if self.trans_a else (m, k), int(self.lda))
            op_b = _column_major(flat_b, int(self.stride_b) * i, *(n, k) if self.trans_b else (k, n), int(self.ldb))
            product = (op_a.T if self.trans_a else op_a) @ (op_b.T if self.trans_b else op_b)
            if self.bias is not None:
                product = product + np.asarray(operands[self.bias], np.float64).reshape(m, 1)
            if self.activation == "relu":
                product = np.maximum(product, 0.0)
            for col in range(n):
                start = int(self.stride_c) * i + int(self.ldc) * col
                out[start:start + m] = product[:, col]
        return out


def _column_major(flat: np.ndarray, offset: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """The column-major ``rows x cols`` matrix at ``offset`` with leading dimension ``ld``."""
    assert ld >= rows, f"leading dimension {ld} < rows {rows}"
    return np.stack([flat[offset + ld * c: offset + ld * c + rows] for c in range(cols)], axis=1)


def rows(shape: Sequence[Size]) -> Size:
    """Every dim but the last, flattened (a Linear's rows)."""
    return math.prod(shape[:-1]) if len(shape) > 1 else 1


def plan_linear(layer: Layer, activation: str | None = None) -> GemmPlan:
    """``y [.., O] = x [.., I] W[O, I]^T (+ b)``: column-major ``y^T [O, M] = W x^T``; bias per row of ``y^T``."""
    x, w = layer.inputs[0], layer.inputs[1]
    features_out, features_in, count = w.shape[0], x.shape[-1], rows(x.shape)
    return GemmPlan(True, False, features_out, count, features_in, "w", features_in, 0, "x", features_in, 0,
                    "out", features_out, 0, bias="bias" if len(layer.inputs) > 2 else None, activation=activation)


def plan_linear_grad_weight(layer: Layer) -> GemmPlan:
    """``dW [O, I] = dy^T [O, M] x [M, I]``: column-major ``dW^T [I, O] = x^T dy`` (x as stored, dy read transposed)."""
    x, dy = layer.inputs
    features_in, features_out, count = x.shape[-1], dy.shape[-1], rows(x.shape)
    return GemmPlan(False, True, features_in, features_out, count, "x", features_in, 0, "dy", features_out, 0,
                    "out", features_in, 0)


def plan_matmul(layer: Layer) -> GemmPlan | None:
    """``C [.., M, N] = A [.., M, K] B [.., K, N]`` (``transpose_b``: B stored ``[.., N, K]``) as the column-major
    ``C^T = B^T A^T``; None when a broadcast is not a whole operand repeated (a strided batch cannot express it)."""
    a, b = layer.inputs
    out = layer.outputs[0]
    if a.rank < 2 or b.rank < 2 or out.rank < 2:
        return None
    batch_dims = tuple(out.shape[:-2])
    strides = []
    for t in (a, b):
        own = tuple(t.shape[:-2])
        padded = (1,) * (len(batch_dims) - len(own)) + own
        if padded == batch_dims:
            strides.append(t.shape[-2] * t.shape[-1])
        elif all(s == 1 for s in padded):
            strides.append(0)  # one matrix for every product
        else:
            return None
    m, n = out.shape[-2], out.shape[-1]
    k = a.shape[-1]
    transpose_b = bool(layer.attrs.get("transpose_b"))
    # B^T as the first operand: B stored [K, N] row-major is column-major [N, K] (no transpose, ld N); stored
    # [N, K] (transpose_b) it is column-major [K, N], read transposed (ld K)
    return GemmPlan(transpose_b, False, n, m, k, "b", k if transpose_b else n, strides[1], "a", k, strides[0],
                    "out", n, m * n, batch=math.prod(batch_dims) if batch_dims else 1)
