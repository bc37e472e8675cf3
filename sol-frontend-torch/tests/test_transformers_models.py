"""HuggingFace transformers models through sol.optimize: BERT, RoBERTa and GPT-2 from tiny random configurations
(nothing downloaded), eval mode, token ids with an attention mask that pads one sequence. The optimized model must
return what the model returns (its ModelOutput class) with every tensor matching eager to rtol 1e-4 / atol 1e-5.

Also here, without transformers: inputs that were None or Python scalars in sol.optimize's example (GPT-2's
past_key_values slot between input_ids and attention_mask) are passed again at call time and must match.
"""

from __future__ import annotations

import pytest
import sol.pytorch as sol
import torch
import torch.utils._pytree as pytree
from sol.errors import SolInputError
from sol_frontend_torch.zoo import import_torchvision_if_installed

RTOL, ATOL = 1e-4, 1e-5
BATCH, LENGTH, VOCAB = 2, 16, 100

#: model type -> its config's sizes (2 layers, hidden 64, 2 heads)
CONFIGS = {
    "bert": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=VOCAB,
                 max_position_embeddings=64),
    "roberta": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                    vocab_size=VOCAB, max_position_embeddings=64),
    "gpt2": dict(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=64, use_cache=False),
}


def _transformers():
    # transformers imports torchvision when it is installed; zoo's import works where torchvision's compiled ops
    # do not load against this torch build
    import_torchvision_if_installed()
    return pytest.importorskip("transformers", reason="transformers is not installed (sol-frontend-torch[test])")


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_model_matches_eager(model_type: str) -> None:
    transformers = _transformers()
    config = transformers.AutoConfig.for_model(model_type, **CONFIGS[model_type])
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    ids = torch.randint(3, VOCAB, (BATCH, LENGTH))
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    mask[1, LENGTH - 5:] = 0  # the second sequence is padded
    # positional, as forward takes them: GPT-2's second parameter is past_key_values
    inputs = (ids, None, mask) if model_type == "gpt2" else (ids, mask)
    with torch.no_grad():
        expected = model(*inputs)
        optimized = sol.optimize(model, *inputs)
        got = optimized(*inputs)
    assert type(got) is type(expected)
    assert list(got.keys()) == list(expected.keys())
    want, have = _tensors(expected), _tensors(got)
    assert len(have) == len(want) > 0
    for key, a, b in zip(expected.keys(), have, want, strict=False):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg=f"{model_type}: {key}")


class _Optional(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x, past=None, scale=2.0, mask=None):
        y = self.fc(x) * scale
        return y if mask is None else y * mask


def test_none_and_scalar_inputs_are_passed_again() -> None:
    model = _Optional().eval()
    x, mask = torch.randn(2, 4), torch.ones(2, 3)
    with torch.no_grad():
        optimized = sol.optimize(model, x, None, 3.0, mask)
        torch.testing.assert_close(optimized(x, None, 3.0, mask), model(x, None, 3.0, mask), rtol=RTOL, atol=ATOL)
        with pytest.raises(SolInputError, match="input 2: the model was optimized for 3.0"):
            optimized(x, None, 2.0, mask)
        with pytest.raises(SolInputError, match="input 1"):
            optimized(x, torch.zeros(1), 3.0, mask)


def test_generation_with_a_cache_matches_eager() -> None:
    """use_cache=True: the prefill returns transformers' DynamicCache, and decode steps that pass the growing cache
    back (by keyword) run a model compiled per cache length; logits and greedy tokens match eager."""
    transformers = _transformers()
    config = transformers.AutoConfig.for_model("gpt2", **{**CONFIGS["gpt2"], "use_cache": True})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(3, VOCAB, (1, 8))
    with torch.no_grad():
        optimized = sol.optimize(model, ids)
        want, got = model(ids), optimized(ids)
        assert type(got.past_key_values) is type(want.past_key_values)
        for step in range(3):
            torch.testing.assert_close(got.logits, want.logits, rtol=RTOL, atol=ATOL, msg=f"step {step}")
            for a, b in zip(pytree.tree_leaves(got.past_key_values), pytree.tree_leaves(want.past_key_values), strict=True):
                torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)
            token = want.logits[:, -1].argmax(-1, keepdim=True)
            assert torch.equal(token, got.logits[:, -1].argmax(-1, keepdim=True))
            want = model(token, cache=want.past_key_values)
            got = optimized(token, cache=got.past_key_values)
        assert got.past_key_values.get_seq_length() == 11
        with pytest.raises(SolInputError, match="no parameter of that name"):
            optimized(ids, no_such_input=ids)


class _Pairs(torch.nn.Module):
    def forward(self, x, pair, scale=None):
        y = x * pair[0] + pair[1]["bias"]
        return y if scale is None else y * scale


def test_container_inputs_and_keywords() -> None:
    """A tuple holding a dict of tensors is flattened into the compiled graph's inputs; keyword arguments land in
    forward's slots."""
    model = _Pairs().eval()
    x, w, b, s = torch.randn(2, 3), torch.randn(2, 3), torch.randn(3), torch.randn(2, 3)
    with torch.no_grad():
        optimized = sol.optimize(model, x, (w, {"bias": b}), s)
        torch.testing.assert_close(optimized(x, (w, {"bias": b}), s), model(x, (w, {"bias": b}), s))
        torch.testing.assert_close(optimized(x, pair=(2 * w, {"bias": b}), scale=s), model(x, (2 * w, {"bias": b}), s))
        with pytest.raises(SolInputError, match="given by position and by keyword"):
            optimized(x, (w, {"bias": b}), pair=(w, {"bias": b}))
