"""Which real models SOL runs: a seeded sample of timm models and transformers architectures through sol.optimize.

Every model is random-initialised from its configuration (nothing is downloaded), optimized in a child process with
a time limit, called once, and compared with eager PyTorch. Per model the report says one of

    ok           the optimized model matches eager (rtol 1e-4 / atol 1e-5, or at least as accurate as eager
                 against a float64 run, as the zoo tests ask)
    mismatch     it ran but its outputs differ (the message gives the errors)
    unsupported  sol.optimize raised SolUnsupportedError (the op it names is counted in the ranking)
    error        anything else raised (the exception's type and first line)
    timeout      optimizing and calling it took longer than --timeout seconds

and then the ops that stop models, ranked by how many models each stops. The sample is drawn from timm's small
variants (names with atto/femto/pico/nano/tiny/small/mini/...), seeded, so that two runs with one seed try the same
models and a second seed tries others.

    python benchmarks/coverage.py                             # 60 timm models (seed 0) + the transformers list
    python benchmarks/coverage.py --seed 1 --transformers 0   # a second timm sample
    python benchmarks/coverage.py --only timm:resnet18,hf:gpt2 --json out.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from typing import Any

#: names of timm's small variants: what the sample is drawn from
SMALL = re.compile(r"(atto|femto|pico|nano|tiny|small|xxs|xs\b|mini|lite|_s$|_b0\b|resnet(18|26|34)(?!\d))")
#: variants whose default resolution makes them much bigger than their name says
LARGE_INPUT = 320

#: transformers model types, each built by AutoModel.from_config from a small configuration
TRANSFORMERS = [
    "albert", "bart", "bert", "big_bird", "bloom", "camembert", "codegen", "convbert", "deberta", "deberta-v2",
    "distilbert", "electra", "falcon", "gemma", "gemma2", "gpt2", "gpt_neo", "gpt_neox", "gptj", "llama", "mistral",
    "mobilebert", "mpnet", "olmo", "opt", "phi", "phi3", "qwen2", "qwen3", "roberta", "roformer", "squeezebert",
    "stablelm", "starcoder2", "t5", "xlm-roberta",
]
#: every configuration gets these sizes (through each config's attribute_map where its names differ)
SMALL_CONFIG = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=1000,
                    max_position_embeddings=128, use_cache=False)
#: what some model types need besides, or instead
CONFIG_OVERRIDES: dict[str, dict[str, Any]] = {
    "albert": dict(embedding_size=32),
    "bart": dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_ffn_dim=128, decoder_ffn_dim=128),
    "big_bird": dict(attention_type="original_full"),
    "funnel": dict(block_sizes=[1, 1]),
    "gemma": dict(num_key_value_heads=2, head_dim=16),
    "gemma2": dict(num_key_value_heads=2, head_dim=16),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], num_layers=2, window_size=8),
    "gpt_neox": dict(rotary_pct=0.5),
    "gptj": dict(rotary_dim=8, n_positions=128),
    "codegen": dict(rotary_dim=8, n_positions=128, n_ctx=128),
    "llama": dict(num_key_value_heads=2),
    "mistral": dict(num_key_value_heads=2, sliding_window=None),
    "mobilebert": dict(embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32, num_feedforward_networks=1),
    "olmo": dict(num_key_value_heads=2),
    "phi3": dict(num_key_value_heads=2, pad_token_id=0),
    "qwen2": dict(num_key_value_heads=2),
    "qwen3": dict(num_key_value_heads=2, head_dim=16),
    "squeezebert": dict(embedding_size=64),
    "stablelm": dict(num_key_value_heads=2),
    "starcoder2": dict(num_key_value_heads=2),
    "t5": dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4),
}
SEQUENCE = 32
RTOL, ATOL = 1e-4, 1e-5


# -- the sample --------------------------------------------------------------------------------------------------
def timm_sample(count: int, seed: int) -> list[str]:
    import timm

    candidates = sorted(n for n in timm.list_models() if SMALL.search(n))
    # the resolution is part of many names (..._384): keep the sample at the sizes its names promise
    candidates = [n for n in candidates if not any(int(r) >= LARGE_INPUT for r in re.findall(r"_(\d{3})(?:_|$)", n))]
    return sorted(random.Random(seed).sample(candidates, min(count, len(candidates))))


# -- one model, in a child process ------------------------------------------------------------------------------
def _build_timm(name: str) -> tuple[Any, tuple[Any, ...]]:
    import timm
    import torch

    model = timm.create_model(name, pretrained=False).eval()
    size = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    return model, (torch.randn(1, *size),)


def _build_transformers(model_type: str) -> tuple[Any, tuple[Any, ...]]:
    import inspect

    import torch
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **{**SMALL_CONFIG, **CONFIG_OVERRIDES.get(model_type, {})})
    model = transformers.AutoModel.from_config(config).eval()
    ids = torch.randint(3, config.vocab_size, (1, SEQUENCE))
    mask = torch.ones(1, SEQUENCE, dtype=torch.long)
    wanted = {"input_ids": ids, "attention_mask": mask}
    names = list(inspect.signature(model.forward).parameters)
    if "decoder_input_ids" in names:  # encoder-decoder models: a decoder prompt as well
        wanted["decoder_input_ids"] = torch.randint(3, config.vocab_size, (1, SEQUENCE // 2))
    last = max(names.index(k) for k in wanted)
    # sol.optimize takes positional inputs, as forward orders them; the slots between are None
    return model, tuple(wanted.get(n) for n in names[:last + 1])


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _compare(model: Any, inputs: tuple[Any, ...], got: Any, expected: Any) -> str:
    """'' when ``got`` matches ``expected``, else what differs (SOL's and eager's errors against float64)."""
    import copy

    import torch

    have, want = _tensors(got), _tensors(expected)
    if len(have) != len(want):
        return f"{len(have)} output tensors, eager returns {len(want)}"
    differing = [k for k, (a, b) in enumerate(zip(have, want, strict=True))
                 if a.shape != b.shape or not torch.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)]
    if not differing:
        return ""
    if any(have[k].shape != want[k].shape for k in differing):
        k = differing[0]
        return f"output {k}: shape {tuple(have[k].shape)}, eager's {tuple(want[k].shape)}"
    with torch.no_grad():
        exact = _tensors(copy.deepcopy(model).double()(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                                                         else x for x in inputs]))
    problems = []
    for k in differing:
        sol_err = (have[k].double() - exact[k].double()).abs().max().item()
        eager_err = (want[k].double() - exact[k].double()).abs().max().item()
        if not sol_err <= 2 * max(eager_err, ATOL):
            problems.append(f"output {k}: against float64 SOL's error is {sol_err:.2e}, eager's {eager_err:.2e}")
    return "; ".join(problems)


def run_one(key: str) -> dict[str, Any]:
    """Optimize, call and compare one model (``timm:<name>`` or ``hf:<model type>``)."""
    from sol_frontend_torch.zoo import import_torchvision

    import_torchvision()  # before timm/transformers: they import torchvision, whose compiled ops may not load
    import sol.pytorch as sol
    import torch
    from sol.errors import SolUnsupportedError

    family, name = key.split(":", 1)
    torch.manual_seed(0)
    started = time.perf_counter()
    try:
        model, inputs = _build_timm(name) if family == "timm" else _build_transformers(name)
    except Exception as error:  # noqa: BLE001 - the sample's own problem, reported as such
        return {"status": "setup", "message": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    try:
        with torch.no_grad():
            expected = model(*inputs)
            optimized = sol.optimize(model, *inputs)
            got = optimized(*inputs)
            problem = _compare(model, inputs, got, expected)
    except SolUnsupportedError as error:
        text = str(error)
        op = re.search(r"the PyTorch op (\S+)", text) or re.search(r"^(aten\.\S+|\S+\.default)", text)
        return {"status": "unsupported", "op": op.group(1) if op else text.splitlines()[0][:120],
                "message": text.splitlines()[0][:300], "seconds": time.perf_counter() - started}
    except Exception as error:  # noqa: BLE001 - every failure is a result here
        return {"status": "error", "message": f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:300]}",
                "seconds": time.perf_counter() - started}
    return {"status": "mismatch" if problem else "ok", "message": problem, "seconds": time.perf_counter() - started}


def run_in_child(key: str, timeout: float) -> dict[str, Any]:
    """``run_one`` in a fresh process (a hang or crash is that model's result, not the report's end)."""
    command = [sys.executable, __file__, "--child", key]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the compiler processes it started too
        process.communicate()
        return {"status": "timeout", "message": f"over {timeout:.0f} s", "seconds": timeout}
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (err.strip().splitlines() or ["no output"])[-1]
    return {"status": "error", "message": f"the child process exited with {process.returncode}: {tail[:300]}"}


# -- the report ---------------------------------------------------------------------------------------------------
STATUSES = ("ok", "mismatch", "unsupported", "error", "timeout", "setup")


def summarise(results: dict[str, dict[str, Any]]) -> str:
    lines = []
    for family, label in (("timm", "timm"), ("hf", "transformers")):
        mine = {k: v for k, v in results.items() if k.startswith(family + ":")}
        if not mine:
            continue
        counts = collections.Counter(v["status"] for v in mine.values())
        tried = len(mine) - counts["setup"]
        lines.append(f"{label}: {counts['ok']}/{tried} ok ({100 * counts['ok'] / max(tried, 1):.0f}%); "
                     + ", ".join(f"{s} {counts[s]}" for s in STATUSES[1:] if counts[s]))
    blockers = collections.Counter(v["op"] for v in results.values() if v["status"] == "unsupported")
    if blockers:
        lines.append("ops that stop models (models stopped):")
        lines += [f"  {count:3d}  {op}" for op, count in blockers.most_common()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timm", type=int, default=60, help="timm models in the sample (60)")
    parser.add_argument("--transformers", type=int, default=len(TRANSFORMERS),
                        help=f"transformers architectures, the first N of the list ({len(TRANSFORMERS)})")
    parser.add_argument("--seed", type=int, default=0, help="the timm sample's seed (0)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per model (120)")
    parser.add_argument("--only", help="comma-separated timm:<name> / hf:<model type> instead of the sample")
    parser.add_argument("--json", help="write every model's result here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_one(args.child)), flush=True)
        return 0
    if args.only:
        keys = args.only.split(",")
    else:
        from sol_frontend_torch.zoo import import_torchvision

        import_torchvision()
        keys = [f"timm:{n}" for n in timm_sample(args.timm, args.seed)] if args.timm else []
        keys += [f"hf:{t}" for t in TRANSFORMERS[:args.transformers]]
    results: dict[str, dict[str, Any]] = {}
    for index, key in enumerate(keys, 1):
        result = results[key] = run_in_child(key, args.timeout)
        detail = result.get("op") or result.get("message") or ""
        print(f"[{index:3d}/{len(keys)}] {key:45s} {result['status']:11s} {result.get('seconds', 0):6.1f}s  {detail}",
              flush=True)
    print()
    print(summarise(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "timeout": args.timeout, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
