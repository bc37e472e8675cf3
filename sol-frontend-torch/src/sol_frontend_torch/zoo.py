"""The model corpus of the tests and benchmarks: torchvision classics plus an MLP and a transformer encoder.

Every model is randomly initialised (``weights=None``); nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch


@contextlib.contextmanager
def _register_fake_disabled() -> Iterator[None]:
    # torchvision's compiled ops (nms, roi_align, ...) do not load against every torch build; importing
    # torchvision then fails in register_fake for those ops. The classification models never use them.
    original = torch.library.register_fake

    def no_op(*args: Any, **kwargs: Any) -> Any:
        def decorator(fn: Any) -> Any:
            return fn

        return decorator if len(args) < 2 else None

    torch.library.register_fake = no_op  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.library.register_fake = original


def import_torchvision() -> ModuleType:
    """Import torchvision even where its compiled ops cannot be registered (the models work without them)."""
    with _register_fake_disabled():
        return importlib.import_module("torchvision")


def import_torchvision_if_installed() -> None:
    """Import torchvision the safe way (`import_torchvision`) where it is installed, before a library that imports it
    itself (timm, transformers) would import it the failing way; nothing where it is not installed."""
    with contextlib.suppress(ImportError):
        import_torchvision()


def _torchvision(name: str, **kwargs: Any) -> Callable[..., torch.nn.Module]:
    def build(**overrides: Any) -> torch.nn.Module:
        models = import_torchvision().models
        return getattr(models, name)(weights=None, **{**kwargs, **overrides})

    build.__name__ = name
    return build


def mlp(features: int = 8192, classes: int = 1000) -> torch.nn.Module:
    """Three linear layers with ReLU (a bandwidth-bound model)."""
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(features, features), torch.nn.ReLU(),
        torch.nn.Linear(features, features), torch.nn.ReLU(),
        torch.nn.Linear(features, classes),
    )


def transformer_encoder(layers: int = 2, d_model: int = 768, heads: int = 12, feedforward: int = 3072) -> torch.nn.Module:
    """BERT-base-sized encoder layers (batch_first)."""
    layer = torch.nn.TransformerEncoderLayer(d_model, heads, feedforward, dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


IMAGE = (1, 3, 224, 224)

#: name -> (constructor, input shape including a batch of 1)
MODELS: dict[str, tuple[Callable[..., torch.nn.Module], tuple[int, ...]]] = {
    "alexnet": (_torchvision("alexnet"), IMAGE),
    "vgg11_bn": (_torchvision("vgg11_bn"), IMAGE),
    "resnet18": (_torchvision("resnet18"), IMAGE),
    "resnet50": (_torchvision("resnet50"), IMAGE),
    "resnext50_32x4d": (_torchvision("resnext50_32x4d"), IMAGE),
    "wide_resnet50_2": (_torchvision("wide_resnet50_2"), IMAGE),
    "densenet121": (_torchvision("densenet121"), IMAGE),
    "squeezenet1_0": (_torchvision("squeezenet1_0"), IMAGE),
    "squeezenet1_1": (_torchvision("squeezenet1_1"), IMAGE),
    "mobilenet_v2": (_torchvision("mobilenet_v2"), IMAGE),
    "mobilenet_v3_small": (_torchvision("mobilenet_v3_small"), IMAGE),
    "mnasnet1_0": (_torchvision("mnasnet1_0"), IMAGE),
    "shufflenet_v2_x1_0": (_torchvision("shufflenet_v2_x1_0"), IMAGE),
    "googlenet": (_torchvision("googlenet", aux_logits=False, init_weights=True), IMAGE),
    "inception_v3": (_torchvision("inception_v3", aux_logits=False, init_weights=True), (1, 3, 299, 299)),
    "efficientnet_b0": (_torchvision("efficientnet_b0"), IMAGE),
    "regnet_y_400mf": (_torchvision("regnet_y_400mf"), IMAGE),
    "convnext_tiny": (_torchvision("convnext_tiny"), IMAGE),
    "vit_b_16": (_torchvision("vit_b_16"), IMAGE),
    "mlp": (mlp, (1, 8192)),
    "transformer_encoder": (transformer_encoder, (1, 128, 768)),
}

#: the torchvision image classifiers of the corpus (every model but the MLP and the encoder)
CLASSIFIERS = tuple(name for name in MODELS if name not in ("mlp", "transformer_encoder"))


def classifier(name: str, num_classes: int = 10, image_size: int = 224) -> torch.nn.Module:
    """A torchvision classifier of the corpus with ``num_classes`` outputs for images of ``image_size`` pixels
    (ViTs are built for that size; the convolutional networks take any size they can pool down). A head that
    starts at exactly zero (ViT's) is randomised, or every other gradient would be zero too."""
    if name not in CLASSIFIERS:
        raise KeyError(f"{name!r} is not a classifier of the corpus; choose one of {', '.join(CLASSIFIERS)}")
    overrides: dict[str, Any] = {"num_classes": num_classes}
    if name.startswith("vit_"):
        overrides["image_size"] = image_size
    model = MODELS[name][0](**overrides)
    randomize_zero_linears(model)
    return model


#: the models too big for the default (fast) test run
SLOW = frozenset({"wide_resnet50_2", "vit_b_16", "vgg11_bn", "convnext_tiny", "resnext50_32x4d", "inception_v3", "densenet121", "resnet50"})


def calibrate_batch_norms(model: torch.nn.Module, shape: tuple[int, ...]) -> None:
    """Give BatchNorm layers the statistics of real activations (one forward pass in training mode).

    With fresh running statistics (mean 0, var 1) deep random networks let
    activations vanish or explode, and comparing outputs near 0 proves little.
    """
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: after one batch, exactly that batch's statistics
    model.train()
    with torch.no_grad():
        model(torch.randn((2,) + tuple(shape[1:])))
    model.eval()


def randomize_zero_linears(model: torch.nn.Module) -> None:
    """Some classifier heads start at exactly zero (ViT); outputs of 0 would make every comparison pass."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and not module.weight.any():
                module.weight.normal_(0.0, 0.02)


def build(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    """A model of the corpus in eval mode (BatchNorms calibrated) and a random example input."""
    constructor, shape = MODELS[name]
    torch.manual_seed(0)
    model = constructor()
    randomize_zero_linears(model)
    calibrate_batch_norms(model, shape)
    return model.eval(), torch.randn(shape)


class LastHiddenState(torch.nn.Module):
    """A transformers model called with token ids alone, returning its last hidden state: one tensor in and one
    out, the form every benchmark peer (ONNX Runtime, OpenVINO) takes too."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids).last_hidden_state


def _transformers(model_type: str, **config: Any) -> Callable[[], torch.nn.Module]:
    def build_text() -> torch.nn.Module:
        import_torchvision_if_installed()  # transformers imports torchvision where it is installed
        transformers = importlib.import_module("transformers")
        return LastHiddenState(transformers.AutoModel.from_config(transformers.AutoConfig.for_model(model_type, **config)))

    build_text.__name__ = model_type
    return build_text


#: language models for the benchmarks (transformers' default configurations, random weights; nothing downloaded):
#: name -> (constructor, token-id shape with a batch of 1, vocabulary size)
TEXT_MODELS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, int], int]] = {
    "bert_base": (_transformers("bert"), (1, 128), 30522),  # BERT-base: 12 layers, hidden 768, 12 heads
    "gpt2_small": (_transformers("gpt2", use_cache=False), (1, 128), 50257),  # GPT-2 small: 12 layers, 768, 12 heads
}


def build_text(name: str, batch: int = 1) -> tuple[torch.nn.Module, torch.Tensor]:
    """A language model of TEXT_MODELS in eval mode and random token ids of ``batch`` sequences."""
    constructor, shape, vocabulary = TEXT_MODELS[name]
    torch.manual_seed(0)
    model = constructor().eval()
    return model, torch.randint(0, vocabulary, (batch, shape[1]))
