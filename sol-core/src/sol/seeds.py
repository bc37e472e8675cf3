"""Random seeds with the three scopes of the original SOL.

``set_seed(s)`` sets the global seed and resets every narrower scope;
``set_seed(s, "x86")`` sets the seed of one device type (and resets that
type's device seeds); ``set_seed(s, "x86", 0)`` sets one device's seed.
``seed(type, idx)`` returns the seed in force for a scope: the narrowest one
that was set.
"""

from __future__ import annotations

from .errors import SolDeviceError

#: The global seed before anyone sets one: fixed, so runs are reproducible.
DEFAULT_SEED = 314159

_global_seed = DEFAULT_SEED
_type_seeds: dict[str, int] = {}
_device_seeds: dict[tuple[str, int], int] = {}
#: how many times set_seed was called: random streams (e.g. training dropout) restart when it changes
_generation = 0


def _check(seed_value: int) -> int:
    if isinstance(seed_value, bool) or not isinstance(seed_value, int):
        raise TypeError(f"seed must be an int, got {type(seed_value).__name__}")
    if not 0 <= seed_value < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed_value}")
    return seed_value


def _scope(device_type: object, device_idx: int | None) -> tuple[str | None, int | None]:
    if device_type is None:
        if device_idx is not None:
            raise SolDeviceError("device_idx needs a device_type (e.g. sol.seed('x86', 0))")
        return None, None
    return str(device_type), device_idx


def set_seed(seed: int, device_type: object = None, device_idx: int | None = None) -> None:
    """Set the seed of the global, device-type, or single-device scope."""
    global _global_seed, _generation
    seed = _check(seed)
    _generation += 1
    dtype, idx = _scope(device_type, device_idx)
    if dtype is None:
        _global_seed = seed
        _type_seeds.clear()
        _device_seeds.clear()
    elif idx is None:
        _type_seeds[dtype] = seed
        for key in [k for k in _device_seeds if k[0] == dtype]:
            del _device_seeds[key]
    else:
        _device_seeds[(dtype, idx)] = seed


def seed(device_type: object = None, device_idx: int | None = None) -> int:
    """The seed in force for a scope (narrowest set scope wins)."""
    dtype, idx = _scope(device_type, device_idx)
    if dtype is not None and idx is not None and (dtype, idx) in _device_seeds:
        return _device_seeds[(dtype, idx)]
    if dtype is not None and dtype in _type_seeds:
        return _type_seeds[dtype]
    return _global_seed


def generation() -> int:
    """Counts `set_seed` calls; a consumer of random numbers restarts its sequence when this changes."""
    return _generation


def seeds() -> dict[str, int]:
    """Every seed that is set: ``{"global": s, "x86": s, "x86:0": s, ...}``."""
    out = {"global": _global_seed}
    out.update(_type_seeds)
    out.update({f"{t}:{i}": s for (t, i), s in sorted(_device_seeds.items())})
    return out
