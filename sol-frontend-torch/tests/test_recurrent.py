"""nn.LSTM, nn.GRU and nn.RNN (tanh/relu) through SOL: outputs, final states and gradients against eager.

Each case is one configuration (mode, layers, bidirectional, batch_first, initial states given or not); the
model returns the output sequence and the final states, all compared. Inference runs in eval mode under
no_grad; training runs one backward of a weighted sum of every output and compares the gradients of the
input, the initial states and every parameter. A value matches when it is within rtol 1e-4 of eager or, failing
that, when its error against a float64 copy of the model is at most twice eager float32's own (the zoo
test's criterion).

CI runs a covering set of configurations (every mode, 1 and 2 layers, both directions, both batch layouts,
with and without states); the full cross product runs in the slow set. CI time of all the recurrent tests
(this file, test_recurrent_devices, sol-core's test_recurrent_ops, sol-backend-x86's test_rnn) with a cold
cache, on the 2-core machine at load ~10: 205 s, of which ~70 s are builds every CI session makes anyway for
its first compile (the parameter reader, the oneDNN glue); 73 s of CPU time.
"""

from __future__ import annotations

import copy
import itertools

import pytest
import sol.pytorch as sol
import torch
from sol.errors import SolUnsupportedError
from torch import nn

STEPS, BATCH, FEATURES, HIDDEN = 5, 3, 4, 6
RTOL, ATOL = 1e-4, 1e-5

#: (mode, layers, bidirectional, batch_first, initial states given)
CI_CASES = [
    ("lstm", 2, True, True, True),
    ("lstm", 1, False, False, False),
    ("gru", 2, True, False, True),
    ("gru", 1, False, True, False),
    ("rnn_tanh", 2, False, True, True),
    ("rnn_relu", 1, True, False, False),
]
SLOW_CASES = [case for case in itertools.product(("lstm", "gru", "rnn_tanh", "rnn_relu"), (1, 2), (False, True),
                                                 (False, True), (False, True)) if case not in CI_CASES]


def case_id(case: tuple) -> str:  # type: ignore[type-arg]
    mode, layers, bidirectional, batch_first, states = case
    return (f"{mode}-{layers}l-{'bi' if bidirectional else 'uni'}-{'bf' if batch_first else 'tf'}-"
            f"{'states' if states else 'zeros'}")


class Recurrent(nn.Module):
    """One recurrent module; returns (output, h_n[, c_n]) as separate tensors (the states may be inputs)."""

    def __init__(self, mode: str, layers: int, bidirectional: bool, batch_first: bool, bias: bool = True,
                 features: int = FEATURES, hidden: int = HIDDEN) -> None:
        super().__init__()
        options = {"num_layers": layers, "bidirectional": bidirectional, "batch_first": batch_first, "bias": bias}
        if mode == "lstm":
            self.rnn: nn.RNNBase = nn.LSTM(features, hidden, **options)
        elif mode == "gru":
            self.rnn = nn.GRU(features, hidden, **options)
        else:
            self.rnn = nn.RNN(features, hidden, nonlinearity=mode.removeprefix("rnn_"), **options)
        self.cell = mode == "lstm"

    def forward(self, x: torch.Tensor, *states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        given = (tuple(states) if self.cell else states[0]) if states else None
        y, final = self.rnn(x, given)
        return (y, *final) if self.cell else (y, final)


#: (batch, steps, features, hidden) of the small cases
SMALL = (BATCH, STEPS, FEATURES, HIDDEN)


def make_case(case: tuple, sizes: tuple[int, int, int, int] = SMALL,  # type: ignore[type-arg]
              seed: int = 0) -> tuple[Recurrent, list[torch.Tensor]]:
    mode, layers, bidirectional, batch_first, states = case
    batch, steps, features, hidden = sizes
    torch.manual_seed(seed)
    model = Recurrent(mode, layers, bidirectional, batch_first, features=features, hidden=hidden)
    x = torch.randn(batch, steps, features) if batch_first else torch.randn(steps, batch, features)
    inputs = [x]
    if states:
        shape = (layers * (2 if bidirectional else 1), batch, hidden)
        inputs += [torch.randn(shape) * 0.5 for _ in range(2 if mode == "lstm" else 1)]
    return model, inputs


def assert_as_accurate_as_eager(what: str, got: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor) -> None:
    assert got.shape == eager.shape and got.dtype == eager.dtype, what
    if torch.allclose(got, eager, rtol=RTOL, atol=ATOL):
        return
    sol_err = (got.double() - exact).abs().max().item()
    eager_err = (eager.double() - exact).abs().max().item()
    assert sol_err <= 2 * max(eager_err, ATOL), (f"{what}: SOL differs from eager by "
                                                 f"{(got - eager).abs().max().item():.2e}; against float64 SOL's error "
                                                 f"is {sol_err:.2e}, eager's {eager_err:.2e}")


def weights(outputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """Fixed, distinct weights per output element: the loss sum(output * weight) reaches every value."""
    generator = torch.Generator().manual_seed(7)
    return [torch.randn(o.shape, generator=generator, dtype=torch.float64) for o in outputs]


def weighted_loss(outputs: tuple[torch.Tensor, ...], factors: list[torch.Tensor]) -> torch.Tensor:
    return sum((o * f.to(o.dtype)).sum() for o, f in zip(outputs, factors, strict=True))  # type: ignore[return-value]


def check_inference(case: tuple, sizes: tuple[int, int, int, int] = SMALL) -> None:  # type: ignore[type-arg]
    model, inputs = make_case(case, sizes)
    model.eval()
    sol_model = sol.optimize(model, *inputs)
    exact_model = copy.deepcopy(model).double()
    with torch.no_grad():
        got, eager = sol_model(*inputs), model(*inputs)
        exact = exact_model(*[t.double() for t in inputs])
    assert len(got) == len(eager)
    for k, (a, b, c) in enumerate(zip(got, eager, exact, strict=True)):
        assert_as_accurate_as_eager(f"{case_id(case)} output {k}", a, b, c)


def one_backward(model: nn.Module, inputs: list[torch.Tensor]) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Gradients of the weighted loss: per input, and per parameter name."""
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    outputs = model(*leaves)
    weighted_loss(outputs, weights(outputs)).backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}  # type: ignore[union-attr]
    return [t.grad for t in leaves], grads  # type: ignore[misc]


def check_training(case: tuple, sizes: tuple[int, int, int, int] = SMALL) -> None:  # type: ignore[type-arg]
    model, inputs = make_case(case, sizes)
    model.train()
    eager, exact = copy.deepcopy(model), copy.deepcopy(model).double()
    sol_model = sol.optimize(model, *[t.clone().requires_grad_(True) for t in inputs]).train()
    got_inputs, got_params = one_backward(sol_model, inputs)
    eager_inputs, eager_params = one_backward(eager, inputs)
    exact_inputs, exact_params = one_backward(exact, [t.double() for t in inputs])
    names = ["x", "h0", "c0"]
    for k, (a, b, c) in enumerate(zip(got_inputs, eager_inputs, exact_inputs, strict=True)):
        assert_as_accurate_as_eager(f"{case_id(case)} gradient of {names[k]}", a, b, c)
    assert set(got_params) == set(eager_params)
    for name in eager_params:
        assert_as_accurate_as_eager(f"{case_id(case)} gradient of {name}", got_params[name], eager_params[name],
                                    exact_params[name])


@pytest.mark.parametrize("case", CI_CASES, ids=case_id)
def test_inference_matches_eager(case: tuple) -> None:  # type: ignore[type-arg]
    check_inference(case)


@pytest.mark.parametrize("case", CI_CASES, ids=case_id)
def test_gradients_match_eager(case: tuple) -> None:  # type: ignore[type-arg]
    check_training(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES, ids=case_id)
def test_every_configuration_matches_eager(case: tuple) -> None:  # type: ignore[type-arg]
    check_inference(case)
    check_training(case)


#: batch 8, 7 steps, 24 features, 40 hidden units: every step's GEMM is worth threads (8 * 40 * 160 multiply-adds
#: for an LSTM) and splits into blocks of 64 gate columns with a partial last one
LARGER = (8, 7, 24, 40)


@pytest.mark.parametrize("mode", ["lstm", pytest.param("gru", marks=pytest.mark.slow),
                                  pytest.param("rnn_tanh", marks=pytest.mark.slow)])
def test_larger_layers_run_their_steps_on_threads(mode: str) -> None:
    """SOL's own loop (``x86::onednn_rnn`` off for inference) and its gradients where a step uses the threads."""
    from sol.codegen.kernels.recurrent import PARALLEL_STEP_WORK

    batch, _, _, hidden = LARGER
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1}[mode]
    if mode != "rnn_tanh":  # a vanilla RNN's one gate stays below the threshold: its steps run on one thread
        assert batch * hidden * gates * hidden >= PARALLEL_STEP_WORK
    case = (mode, 1, True, True, True)
    previous = sol.config["x86::onednn_rnn"]
    sol.config["x86::onednn_rnn"] = False
    try:
        check_inference(case, LARGER)
    finally:
        sol.config["x86::onednn_rnn"] = previous
    check_training(case, LARGER)


def test_any_batch_size_and_unbatched_sequences() -> None:
    """A wildcard batch (one artifact for batches 1 and 4), and an unbatched [T, I] sequence."""
    torch.manual_seed(1)
    model = Recurrent("lstm", 1, True, True).eval()
    sol_model = sol.optimize(model, sol.input([0, STEPS, FEATURES]))
    for batch in (1, 4):
        x = torch.randn(batch, STEPS, FEATURES)
        with torch.no_grad():
            for k, (a, b) in enumerate(zip(sol_model(x), model(x), strict=True)):
                torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg=lambda m, k=k, n=batch: f"batch {n} {k}: {m}")
    gru = Recurrent("gru", 2, False, False, bias=False).eval()  # and no biases
    x = torch.randn(STEPS, FEATURES)
    with torch.no_grad():
        for a, b in zip(sol.optimize(gru, x)(x), gru(x), strict=True):
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


class Tagger(nn.Module):
    """A sequence model as people write them: embedding-free LSTM encoder, then a Linear over every step."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(FEATURES, HIDDEN, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * HIDDEN, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.head(torch.relu(y))


def test_lstm_tagger_trains_like_eager() -> None:
    torch.manual_seed(2)
    model = Tagger()
    eager = copy.deepcopy(model)
    x, target = torch.randn(4, STEPS, FEATURES), torch.randint(0, 3, (4, STEPS))
    sol_model = sol.optimize(model, x).train()
    curves = []
    for net in (sol_model, eager):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
        curve = []
        for _ in range(8):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(net(x).flatten(0, 1), target.flatten())
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
        curves.append(curve)
    torch.testing.assert_close(torch.tensor(curves[0]), torch.tensor(curves[1]), rtol=1e-4, atol=1e-5)
    assert curves[0][-1] < curves[0][0]
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_library_free_gradients_match_eager() -> None:
    """``x86::dnn`` off: the input projections and weight gradients are generated GEMMs too, no library call."""
    previous = sol.config["x86::dnn"]
    sol.config["x86::dnn"] = False
    try:
        check_training(("lstm", 1, True, True, True))
        check_training(("gru", 1, False, False, True))
    finally:
        sol.config["x86::dnn"] = previous


def test_projections_are_a_clear_error() -> None:
    model = nn.LSTM(FEATURES, HIDDEN, proj_size=2).eval()
    with pytest.raises(SolUnsupportedError, match="proj_size"):
        sol.optimize(model, torch.randn(STEPS, BATCH, FEATURES))


def test_torch_compile_with_rnn_capture_allowed() -> None:
    """TorchDynamo leaves RNN modules to eager unless ``allow_rnn``; with it the layer reaches SOL's backend."""
    import torch._dynamo

    torch.manual_seed(4)
    model = Tagger().eval()
    x = torch.randn(2, STEPS, FEATURES)
    sol_backend = torch._dynamo.lookup_backend("sol")
    seen: list[str] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        seen.extend(str(node.target) for node in gm.graph.nodes)
        return sol_backend(gm, example_inputs)

    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True), torch.no_grad():
        compiled = torch.compile(model, backend=backend)
        torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
    torch._dynamo.reset()
    assert any("lstm" in target for target in seen), seen
