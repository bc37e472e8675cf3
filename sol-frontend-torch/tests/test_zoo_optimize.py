"""End to end: every model of the corpus through sol.optimize, compiled x86 code vs eager.

Each model is optimized once with a wildcard batch (``sol.input([0, ...])``)
and then called at batch 1 and batch 4; both must match eager PyTorch to
rtol 1e-4 / atol 1e-5. The big models are in the ``slow`` set.
"""

from __future__ import annotations

import pytest
import sol.pytorch as sol
import torch
from sol_frontend_torch.zoo import MODELS, SLOW, build

CASES = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in sorted(MODELS)]


@pytest.fixture(autouse=True)
def _private_cache(sol_cache_dir):
    """Each run compiles afresh into a private cache (sol_cache_dir comes from sol.testing)."""


@pytest.mark.parametrize("name", CASES)
def test_optimized_model_matches_eager(name):
    model, example = build(name)
    spec = sol.input([0, *example.shape[1:]], dtype=example.dtype)
    sol_model = sol.optimize(model, spec, batch_size=example.shape[0])
    for batch in (1, 4):
        torch.manual_seed(batch)
        x = torch.randn((batch, *example.shape[1:]), dtype=example.dtype) if example.is_floating_point() else example.repeat(batch, *[1] * (example.dim() - 1))
        with torch.no_grad():
            expected = model(x)
            got = sol_model(x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=lambda m, b=batch: f"{name} batch {b}: {m}")
