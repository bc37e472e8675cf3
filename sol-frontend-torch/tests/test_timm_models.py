"""timm models of the families that used to stop SOL, shrunk through their own configuration arguments (nothing
downloaded): Swin (roll, relative position index), SwinV2 (cosine attention: vector norms), EVA-02 and a ViT with
mixed RoPE (rotary embeddings: stack, repeat, meshgrid), XCiT (norms), MaxViT (relative MLP bias), CoaTNeXt,
HRNet (nearest upsampling, in the slow set). Inference against eager (as accurate as eager against float64 where
they differ beyond rtol 1e-4); gradients of the parameters against eager for one model per family."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import sol.pytorch as sol
import torch

RTOL, ATOL = 1e-4, 1e-5

#: name -> (configuration arguments, image size)
MODELS: dict[str, tuple[dict[str, Any], int]] = {
    "swin_tiny_patch4_window7_224": (dict(window_size=4, depths=(1, 1), num_heads=(2, 4), embed_dim=32), 64),
    "swinv2_tiny_window8_256": (dict(window_size=4, depths=(1, 1), num_heads=(2, 4), embed_dim=32), 64),
    "eva02_tiny_patch14_224": (dict(depth=2), 56),
    "vit_small_patch16_rope_mixed_ape_224": (dict(depth=2), 64),
    "xcit_nano_12_p8_224": (dict(depth=2), 64),
    "maxvit_rmlp_pico_rw_256": (dict(depths=(1, 1), embed_dim=(32, 64)), 64),
    "coatnext_nano_rw_224": ({}, 64),
    "hrnet_w18_small_v2": ({}, 224),
}
SLOW = {"coatnext_nano_rw_224", "hrnet_w18_small_v2"}
#: one per family: the gradient check
GRADIENTS = ["swin_tiny_patch4_window7_224", "eva02_tiny_patch14_224"]


def _build(name: str, **overrides: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    from sol_frontend_torch.zoo import import_torchvision_if_installed

    import_torchvision_if_installed()  # timm imports torchvision, whose compiled ops may not load against this torch
    timm = pytest.importorskip("timm", reason="timm is not installed (sol-frontend-torch[test])")
    kwargs, size = MODELS[name]
    image = {"img_size": size} if "img_size" in timm.create_model.__code__.co_varnames or size != 224 else {}
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **{**image, **kwargs, **overrides})
    return model, torch.randn(2, 3, size, size)


def _error(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in MODELS])
def test_inference_matches_eager(name: str) -> None:
    model, x = _build(name)
    model.eval()
    with torch.no_grad():
        want = model(x)
        got = sol.optimize(model, x)(x)
    if torch.allclose(got, want, rtol=RTOL, atol=ATOL):
        return
    with torch.no_grad():
        exact = copy.deepcopy(model).double()(x.double())
    assert _error(got, exact) <= 2 * max(_error(want, exact), ATOL), (
        f"{name}: SOL differs from eager by {_error(got, want):.2e}; against float64 SOL's error is "
        f"{_error(got, exact):.2e}, eager's {_error(want, exact):.2e}")


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradients_match_eager(name: str) -> None:
    # stochastic depth draws its masks from SOL's generator in SOL and from torch's in eager (timm's Swin
    # defaults to drop_path_rate=0.1): two independent draws, so the comparison is made without it
    model, x = _build(name, drop_path_rate=0.0)
    reference = copy.deepcopy(model)
    model.train()
    reference.train()
    optimized = sol.optimize(model, x)
    optimized.train()
    weight = torch.randn(2, 10)
    (optimized(x) * weight).sum().backward()
    (reference(x) * weight).sum().backward()
    for (label, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        scale = q.grad.abs().max().item() + 1e-6
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4 * scale, msg=label)
