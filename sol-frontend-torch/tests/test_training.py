"""Training with SOL: gradients, optimizer steps, BatchNorm statistics, losses, state_dict round trips.

Small models, built once per module (the compiled artifacts are cached per test session).
"""

from __future__ import annotations

import copy

import pytest
import sol
import torch

from ._training_helpers import assert_buffers_match, eager_reference, loss_curve, step_loss, without_dropout


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
            torch.nn.AvgPool2d(2, ceil_mode=True), torch.nn.Dropout(0.25))
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def _pair() -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = ConvNet()
    without_dropout(model)
    return model, copy.deepcopy(model), torch.randn(4, 3, 12, 12)


def test_one_step_gradients_and_batch_norm_statistics() -> None:
    model, eager, x = _pair()
    sol_model = sol.optimize(model, x)
    sol_model.train()
    eager.train()
    x.requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(sol_model(x), torch.tensor([0, 1, 2, 3]))  # a loss outside the model
    loss.backward()
    x_eager = x.detach().clone().requires_grad_(True)
    loss_eager = torch.nn.functional.cross_entropy(eager(x_eager), torch.tensor([0, 1, 2, 3]))
    loss_eager.backward()
    torch.testing.assert_close(loss, loss_eager, rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=1e-3, atol=1e-6)  # the input gradient too
    assert_buffers_match(model, eager)
    assert int(model.features[1].num_batches_tracked) == 1


def test_sgd_and_adam_loss_curves_match_eager_and_weights_copy_back() -> None:
    model, eager, x = _pair()
    target = torch.tensor([4, 3, 2, 1])
    sol_model = sol.optimize(model, x).train()
    eager.train()
    curves: list[list[float]] = []
    for net in (sol_model, eager):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        curves.append(loss_curve(net, optimizer, lambda n: torch.nn.functional.cross_entropy(n(x), target)))
    torch.testing.assert_close(torch.tensor(curves[0]), torch.tensor(curves[1]), rtol=1e-3, atol=1e-5)
    assert curves[0][-1] < curves[0][0] * 0.5
    assert_buffers_match(model, eager)
    for net in (sol_model, eager):  # a few Adam steps continue from there
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        for _ in range(3):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(x), target).backward()
            optimizer.step()
    # trained with SOL, copied back into plain PyTorch: the same eval outputs (and SOL's inference sees the new weights)
    fresh = ConvNet()
    fresh.load_state_dict(sol_model.state_dict())
    sol_model.eval()
    eager.eval()
    with torch.no_grad():
        # 53 optimizer steps amplify float rounding differences a little (momentum, Adam): a looser match to eager
        torch.testing.assert_close(fresh.eval()(x), eager(x), rtol=1e-2, atol=1e-3)
        torch.testing.assert_close(sol_model(x), fresh(x), rtol=1e-4, atol=1e-5)


def test_weights_loaded_before_training_are_used() -> None:
    model, eager, x = _pair()
    other = ConvNet()
    without_dropout(other)
    sol_model = sol.optimize(model, x).train()
    sol_model.load_state_dict(other.state_dict())
    out = sol_model(x)
    torch.testing.assert_close(out, other.train()(x), rtol=1e-4, atol=1e-5)


class WithLoss(torch.nn.Module):
    """A wrapper model that returns (output, loss)."""

    def __init__(self, loss: str, reduction: str) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
        self.loss, self.reduction = loss, reduction

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(x)
        f = torch.nn.functional
        if self.loss == "cross_entropy":
            loss = f.cross_entropy(out, target, reduction=self.reduction)
        elif self.loss == "nll":
            loss = f.nll_loss(f.log_softmax(out, 1), target, reduction=self.reduction, ignore_index=2)
        elif self.loss == "mse":
            loss = f.mse_loss(out, target, reduction=self.reduction)
        elif self.loss == "l1":
            loss = f.l1_loss(out, target, reduction=self.reduction)
        else:
            loss = f.binary_cross_entropy_with_logits(out, target, reduction=self.reduction,
                                                      pos_weight=torch.tensor([1.0, 2.0, 0.5, 1.0]))
        return out, loss


@pytest.mark.parametrize("loss", ["cross_entropy", "nll", "mse", "l1", "bce_with_logits"])
def test_losses_inside_the_model(loss: str) -> None:
    torch.manual_seed(1)
    x = torch.randn(5, 6)
    if loss in ("cross_entropy", "nll"):
        target = torch.tensor([0, 3, 2, 1, 3])
    elif loss == "bce_with_logits":
        target = torch.rand(5, 4)
    else:
        target = torch.randn(5, 4)
    for reduction in ("mean", "sum"):
        model = WithLoss(loss, reduction)
        eager = copy.deepcopy(model)
        sol_model = sol.optimize(model, x, target).train()
        _, value = sol_model(x, target)
        value.backward()
        _, expected = eager(x, target)
        expected.backward()
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


def test_eval_mode_with_gradients_recomputes_lazily() -> None:
    model, eager, x = _pair()
    sol_model = sol.optimize(model, x)
    sol_model.eval()
    eager.eval()
    step_loss(sol_model(x)).backward()
    step_loss(eager(x)).backward()
    for p, q in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-6)


def test_no_grad_in_training_mode_still_updates_statistics() -> None:
    model, eager, x = _pair()
    sol_model = sol.optimize(model, x).train()
    eager.train()
    with torch.no_grad():
        torch.testing.assert_close(sol_model(x), eager(x), rtol=1e-4, atol=1e-5)
    assert_buffers_match(model, eager)


def test_batch_norm_with_cumulative_average_momentum_none() -> None:
    """momentum=None: running statistics are the average over all batches (factor 1 / num_batches_tracked)."""
    model, eager, x = _pair()
    for m in (*model.modules(), *eager.modules()):
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None
    sol_model = sol.optimize(model, x).train()
    eager.train()
    for step in range(3):
        batch = x + step
        loss = sol_model(batch).square().mean()
        loss.backward()
        eager(batch).square().mean().backward()
        assert_buffers_match(model, eager)
    assert model.features[1].momentum is None  # restored after the capture
    assert int(model.features[1].num_batches_tracked) == 3
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_dropout_is_reproducible_with_correct_statistics_and_gradients() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Dropout(0.3))
    x = torch.randn(32, 64)
    sol_model = sol.optimize(model, x).train()

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        xg = x.clone().requires_grad_(True)
        out = sol_model(xg)
        out.sum().backward()
        return out.detach(), xg.grad

    sol.set_seed(7)
    first, grad = run()
    second, _ = run()
    sol.set_seed(7)
    again, grad_again = run()
    assert torch.equal(first, again) and torch.equal(grad, grad_again)  # set_seed restarts the sequence of masks
    assert not torch.equal(first, second)  # every step draws a new mask
    with torch.no_grad():
        dense = model[0](x)
    kept = first != 0
    assert abs(1 - kept.float().mean().item() - 0.3) < 0.02  # the drop rate
    torch.testing.assert_close(first[kept], dense[kept] / 0.7, rtol=1e-5, atol=1e-6)  # kept values are scaled
    # given the mask, the gradient is the eager gradient of x -> linear -> mask * scale
    xg = x.clone().requires_grad_(True)
    (model[0](xg) * kept / 0.7).sum().backward()
    torch.testing.assert_close(grad, xg.grad, rtol=1e-4, atol=1e-5)
    assert sol.seed() == 7


class StochasticDepthNet(torch.nn.Module):
    """A residual branch dropped per sample ("row") or for the whole batch ("batch"), as in EfficientNet/ConvNeXt."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        from sol_frontend_torch import zoo

        self.branch = torch.nn.Linear(16, 16)
        self.drop = zoo.import_torchvision().ops.StochasticDepth(0.3, mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.branch(x))


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_stochastic_depth_draws_reproducible_masks_with_correct_gradients(mode: str) -> None:
    torch.manual_seed(0)
    model = StochasticDepthNet(mode)
    x = torch.randn(300, 16)
    sol_model = sol.optimize(model, sol.input([0, 16])).train()  # the wildcard batch: a mask of [batch, 1]

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        xg = x.clone().requires_grad_(True)
        out = sol_model(xg)
        (out * torch.arange(16.0)).sum().backward()
        return out.detach(), xg.grad

    sol.set_seed(11)
    steps = [run() for _ in range(6)]
    sol.set_seed(11)
    again, grad_again = run()
    assert torch.equal(steps[0][0], again) and torch.equal(steps[0][1], grad_again)  # set_seed restarts the draws
    with torch.no_grad():
        dense = model.branch(x)
    for out, grad in steps:
        kept = (out != 0).all(dim=1, keepdim=True)
        assert torch.equal(kept.expand_as(out), out != 0)  # whole rows are dropped or kept
        if mode == "batch":
            assert kept.all() or not kept.any()
        torch.testing.assert_close(out, dense * kept / 0.7, rtol=1e-5, atol=1e-6)  # kept rows scaled by 1 / (1 - p)
        xg = x.clone().requires_grad_(True)
        ((model.branch(xg) * kept / 0.7) * torch.arange(16.0)).sum().backward()
        torch.testing.assert_close(grad, xg.grad, rtol=1e-4, atol=1e-5)
    masks = torch.stack([(out != 0).any(dim=1) for out, _ in steps])
    assert len({tuple(m.tolist()) for m in masks}) > 1  # each step draws anew
    if mode == "row":
        assert abs(masks.float().mean().item() - 0.7) < 0.03  # the survival rate over 6 x 300 draws
    with torch.no_grad():
        torch.testing.assert_close(sol_model.eval()(x), dense)  # eval mode: the identity


class DropPathBlock(torch.nn.Module):
    """Swin's residual block shape with timm's DropPath written out (``x.new_empty((B, 1, 1, 1)).bernoulli_(keep)``,
    ``div_(keep)``, a product): channels-last (B, H, W, C) in, a LayerNorm + Linear branch, reshape to (B, H*W, C)
    for a second dropped branch and back."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.keep = 1 - p
        self.norm1, self.fc1 = torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)
        self.norm2, self.fc2 = torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)
        self.masks: list[torch.Tensor] | None = None  # eager: use these masks instead of drawing

    def drop(self, x: torch.Tensor, k: int) -> torch.Tensor:
        if self.masks is not None:
            return x * self.masks[k].view(-1, *[1] * (x.dim() - 1)) / self.keep
        if not self.training:
            return x
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(self.keep)
        return x * mask.div_(self.keep)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, H, W, C = x.shape
        x = x + self.drop(self.fc1(self.norm1(x)), 0)
        x = x.reshape(B, -1, C)
        x = x + self.drop(self.fc2(self.norm2(x)), 1)
        return x.reshape(B, H, W, C)


def test_timm_drop_path_forward_and_gradients_match_eager_given_the_drawn_masks() -> None:
    """A train-mode forward with stochastic depth is a random draw: SOL's generator and torch's draw different masks,
    so the train output of timm's Swin (drop_path_rate 0.1 by default) differs from eager's where either drops a
    branch. It is right when it equals eager given SOL's masks, read off SOL's output here, gradients too."""
    torch.manual_seed(0)
    model = DropPathBlock(0.5)
    x = torch.randn(6, 4, 4, 8)
    sol_model = sol.optimize(model, x).train()
    combos = [torch.tensor(c) for c in ((0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0))]
    drawn = set()
    for _ in range(4):
        model.zero_grad()
        xg = x.clone().requires_grad_(True)
        out = sol_model(xg)
        weight = torch.randn_like(out)
        (out * weight).sum().backward()
        got = [p.grad.clone() for p in model.parameters()] + [xg.grad]
        eager = copy.deepcopy(model)
        with torch.no_grad():  # each sample's (first, second) keep flags: the combination eager matches SOL with
            candidates = []
            for c in combos:
                eager.masks = [c[0].expand(6), c[1].expand(6)]
                candidates.append((eager(x) - out).reshape(6, -1).abs().amax(1))
            chosen = torch.stack(candidates).argmin(0)
        masks = torch.stack([combos[i] for i in chosen.tolist()], 1)
        drawn.add(tuple(masks.flatten().tolist()))
        eager.masks = [masks[0], masks[1]]
        eager.zero_grad()
        xg = x.clone().requires_grad_(True)
        want = eager(xg)
        torch.testing.assert_close(out, want.detach(), rtol=1e-5, atol=1e-5)
        (want * weight).sum().backward()
        for a, b in zip(got, [p.grad for p in eager.parameters()] + [xg.grad], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert len(drawn) > 1  # each step draws anew, and some branches were dropped
    assert any(0.0 in masks for masks in drawn)


@pytest.mark.parametrize("name", ["efficientnet_b0", pytest.param("convnext_tiny", marks=pytest.mark.slow)])
def test_stochastic_depth_models_train(name: str) -> None:
    """The zoo's models with StochasticDepth capture its empty + bernoulli_ in training mode and train."""
    from sol_frontend_torch import zoo

    torch.manual_seed(0)
    model = zoo.classifier(name, num_classes=10, image_size=64).train()
    x, target = torch.randn(2, 3, 64, 64), torch.tensor([1, 7])
    sol_model = sol.optimize(model, x).train()
    torch.nn.functional.cross_entropy(sol_model(x), target).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    masks = [layer for layer in sol_model._sol_variants[True].graph.layers
             if layer.op == "dropout_train" and layer.attrs.get("unscaled")]
    depth = [m for m in model.modules() if type(m).__name__ == "StochasticDepth"]
    assert 0 < len(masks) <= len(depth)  # the StochasticDepths on residual paths draw their masks in the compiled step


def test_wildcard_batch_training() -> None:
    model, eager, _ = _pair()
    sol_model = sol.optimize(model, sol.input([0, 3, 12, 12])).train()
    eager.train()
    for batch in (3, 5):
        x = torch.randn(batch, 3, 12, 12)
        model.zero_grad()
        eager.zero_grad()
        step_loss(sol_model(x)).backward()
        step_loss(eager(x)).backward()
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-6)
    assert_buffers_match(model, eager)


def test_float64_reference_helper_agrees_on_a_small_model() -> None:
    model, _, x = _pair()
    reference = eager_reference(model.train(), x)
    sol_model = sol.optimize(model, x).train()
    step_loss(sol_model(x)).backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad.double(), q.grad, rtol=1e-3, atol=1e-5)


class InterleavedRotary(torch.nn.Module):
    """EVA-02's interleaved rotary embedding: x[..., ::2] and x[..., 1::2] (strided slices) rotated and interleaved
    back, plus a slice with step 3 that leaves a tail of the last dim unread."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(10, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x)
        even, odd = x[..., ::2], x[..., 1::2]
        rotated = torch.stack([-odd, even], -1).reshape(x.shape)
        return x * 0.6 + rotated * 0.8 + x[..., 1:8:3].sum(-1, keepdim=True)


def test_strided_slice_gradients_match_eager() -> None:
    torch.manual_seed(0)
    model = InterleavedRotary()
    x = torch.randn(3, 4, 10)
    reference = copy.deepcopy(model)
    sol_model = sol.optimize(model, x).train()
    xg, xr = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    weight = torch.randn(3, 4, 10)
    out = sol_model(xg)
    want = reference(xr)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    (out * weight).sum().backward()
    (want * weight).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_reassigned_and_frozen_parameters_between_training_steps() -> None:
    """The parameter slots of a training step are resolved once and again after any module tensor or submodule
    assignment: a submodule and a weight replaced between two steps (``model.head = Linear(...)``,
    ``module.weight = Parameter(...)``) compute the next step and get its gradients, and a frozen layer gets none."""
    model, eager, x = _pair()
    sol_model = sol.optimize(model, x).train()
    eager.train()
    for net in (sol_model, eager):
        step_loss(net(x)).backward()
    torch.manual_seed(1)
    head = torch.nn.Linear(8, 5)
    conv_weight = torch.randn_like(model.features[4].weight)
    for net in (model, eager):
        net.zero_grad(set_to_none=True)
        net.head = copy.deepcopy(head)
        net.features[4].weight = torch.nn.Parameter(conv_weight.clone())
        net.features[0].weight.requires_grad_(False)
    losses = [step_loss(net(x)) for net in (sol_model, eager)]
    for loss in losses:
        loss.backward()
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    assert model.features[0].weight.grad is None
    for name in ("head.weight", "head.bias", "features.4.weight"):
        mine, theirs = model.get_parameter(name).grad, eager.get_parameter(name).grad
        assert mine is not None, name
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
