"""``sol.config``: typed settings with a declared schema.

Keys are ``component::key``. sol-core declares its own keys below; plugins
add theirs through the ``sol_config_keys`` hook. Reading or writing a key that
is not declared, or writing a value of the wrong type, raises
`SolConfigError` naming the closest valid keys.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any

from . import log
from .errors import SolConfigError
from .records import ConfigKey

CORE_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("log::level", str, log.initial_level(), "SOL's log level (also settable with the SOL_LOG environment variable).", choices=log.LEVELS),
    ConfigKey("compiler::debug", bool, False, "Build generated code with debug symbols, print per-Cluster execution times after every call, and write the network as a GraphViz graph (plus SVG/PNG when `dot` is installed) and a copy of the generated source into compiler::debug_dir."),
    ConfigKey("compiler::name", str, "", "Prefix of every debug artifact (source files, graphs, plots)."),
    ConfigKey("compiler::debug_dir", str, "sol_debug", "Directory of the debug artifacts (relative paths are relative to the working directory)."),
    ConfigKey("compiler::debug_memory_consumption", bool, False, "Write a plot of live workspace memory over the schedule into compiler::debug_dir (needs `pip install sol-core[debug]`)."),
    ConfigKey("compiler::cc", str, "g++", "The host C++ compiler used to build generated code."),
    ConfigKey("compiler::cflags", str, "-O3 -march=native -fopenmp", "Flags passed to the host compiler for generated code."),
    ConfigKey("compiler::pch", bool, True, "Precompile the system headers of generated C++ once per toolchain (GCC only) and reuse them in every compile; it changes no generated code, only how long a compile takes."),
    ConfigKey("compiler::progress", bool, True, "Show a progress bar for compiles that take longer than a second."),
    ConfigKey("compiler::profile", bool, False, "Time every Cluster of forward in generated code (CompiledModel.profile() reads the totals)."),
    ConfigKey("compiler::precision", str, "fp32", "What sol.optimize computes in unless its precision= says: 'fp32' (as the framework), 'bf16' or 'fp16' (Conv/Linear/MatMul in that type with fp32 accumulation; inputs and outputs keep their dtype), 'auto' (bf16 where the device computes it natively, else fp32). A device without the precision raises a SolUnsupportedError.", choices=("fp32", "bf16", "fp16", "auto")),
    ConfigKey("runtime::huge_pages", bool, True, "Back a compiled model's derived parameters (packed weights) and workspace with transparent huge pages where Linux offers them (madvise), so streaming the weights does not thrash the TLB (sol.runtime.host_memory)."),
    ConfigKey("autotuning", bool, True, "Let SOL time alternative implementations at compile time and keep the fastest."),
    ConfigKey("cache::enabled", bool, True, "Serve compiled artifacts from the on-disk cache and store new ones there."),
)

# Hooks that must run when a key changes (e.g. the log level).
_ON_CHANGE: dict[str, Callable[[Any], None]] = {"log::level": log.set_level}


class Config(MutableMapping[str, Any]):
    """The settings store behind ``sol.config``.

    `schema_provider` is called lazily to get the plugin-declared keys, so
    merely importing sol does not load any plugin.
    """

    def __init__(self, schema_provider: Callable[[], Iterable[ConfigKey]] | None = None) -> None:
        self._schema: dict[str, ConfigKey] = {k.name: k for k in CORE_KEYS}
        self._values: dict[str, Any] = {}
        self._provider = schema_provider
        self._provided = schema_provider is None

    # -- schema ------------------------------------------------------------
    def declare(self, key: ConfigKey) -> None:
        """Add a key to the schema (used by the plugin loader)."""
        existing = self._schema.get(key.name)
        if existing is not None and existing != key:
            raise SolConfigError(f"config key {key.name!r} is declared twice with different definitions")
        self._schema[key.name] = key

    @property
    def schema(self) -> dict[str, ConfigKey]:
        self._load_plugin_keys()
        return dict(self._schema)

    def _load_plugin_keys(self) -> None:
        if not self._provided and self._provider is not None:
            self._provided = True  # set first: the provider may read config itself
            for key in self._provider():
                self.declare(key)

    def _lookup(self, name: str) -> ConfigKey:
        if not isinstance(name, str):
            raise SolConfigError(f"config keys are strings like 'compiler::debug', not {type(name).__name__}")
        self._load_plugin_keys()
        key = self._schema.get(name)
        if key is None:
            close = difflib.get_close_matches(name, self._schema, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise SolConfigError(
                f"unknown config key {name!r}.{hint} `sol.config.keys()` lists all {len(self._schema)} keys."
            )
        return key

    def on_change(self, name: str, callback: Callable[[Any], None]) -> None:
        """Call ``callback`` with the new value whenever ``name`` is set or reset (one callback per key: for a
        setting a plugin keeps a C-level copy of, which must not wait for the next time it reads the key)."""
        _ON_CHANGE[name] = callback

    # -- mapping protocol --------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        key = self._lookup(name)
        return self._values.get(name, key.default)

    def __setitem__(self, name: str, value: Any) -> None:
        key = self._lookup(name)
        value = _coerce(key, value)
        if name in _ON_CHANGE:
            _ON_CHANGE[name](value)
        self._values[name] = value

    def __delitem__(self, name: str) -> None:
        """Reset a key to its default."""
        key = self._lookup(name)
        self._values.pop(name, None)
        if name in _ON_CHANGE:
            _ON_CHANGE[name](key.default)

    def __iter__(self) -> Iterator[str]:
        self._load_plugin_keys()
        return iter(sorted(self._schema))

    def __len__(self) -> int:
        self._load_plugin_keys()
        return len(self._schema)

    def doc(self, name: str) -> str:
        return self._lookup(name).doc

    def forget_plugin_keys(self) -> None:
        """Drop plugin-declared keys and their values; they are re-read on next use.

        Called when the plugin registry is replaced (tests, plugin installs).
        """
        core = {k.name for k in CORE_KEYS}
        self._schema = {n: k for n, k in self._schema.items() if n in core}
        self._values = {n: v for n, v in self._values.items() if n in core}
        self._provided = self._provider is None

    def reset(self) -> None:
        """Every key back to its default."""
        for name in list(self._values):
            del self[name]

    def __repr__(self) -> str:
        return "sol.config{" + ", ".join(f"{k!r}: {self[k]!r}" for k in self) + "}"


def _coerce(key: ConfigKey, value: Any) -> Any:
    types = key.type if isinstance(key.type, tuple) else (key.type,)
    # bool is an int subclass; never let True pass as an int setting or 1 as a bool one
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok and float in types and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        wanted = " or ".join(t.__name__ for t in types)
        raise SolConfigError(
            f"config key {key.name!r} takes a {wanted}, got {type(value).__name__} {value!r}. ({key.doc})"
        )
    if key.choices is not None:
        probe = value.upper() if isinstance(value, str) and key.name == "log::level" else value
        if probe not in key.choices:
            raise SolConfigError(f"config key {key.name!r} must be one of {list(key.choices)}, got {value!r}")
        value = probe
    return value
