"""SOL's own plugin loader.

Plugins are found through the entry-point groups ``sol.backends`` and
``sol.frontends`` and nowhere else. Loading one plugin can fail in many ways
(import error, wrong sol-core version, a hook pluggy rejects, a hook that has
no spec, a record that does not validate, a name another distribution also
claims); each failure disables only that plugin, logs one line naming it and
why, and shows as status ``error`` in ``sol.plugins()``. With
``SOL_STRICT_PLUGINS=1`` the failure is raised instead (for plugin authors).
``SOL_DISABLE_PLUGINS=a,b`` blocks plugins by name, ``SOL_LOAD_PLUGINS=a,b``
loads only the named ones.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import pluggy
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from . import log
from ._version import __version__
from .errors import SolPluginError
from .hookspecs import PROJECT_NAME, SolSpecs
from .records import Backend, ConfigKey, DeployTarget, Frontend, PluginInfo

GROUPS = {"sol.backends": "backend", "sol.frontends": "frontend"}
CORE_DISTRIBUTION = "sol-core"

_log = log.get("plugins")


class EntryPointLike(Protocol):
    """What the loader needs of an entry point (tests pass simple fakes)."""

    name: str
    value: str
    group: str

    def load(self) -> Any: ...


@dataclass
class _Candidate:
    entry_point: EntryPointLike
    kind: str
    distribution: str
    version: str
    requires: tuple[str, ...]


def _env_list(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    return {part.strip().lower() for part in raw.split(",") if part.strip()}


def strict() -> bool:
    return os.environ.get("SOL_STRICT_PLUGINS", "").strip().lower() in {"1", "true", "yes", "on"}


def installed_entry_points() -> list[EntryPointLike]:
    """Every entry point of SOL's groups in the current environment."""
    found: list[EntryPointLike] = []
    for group in GROUPS:
        found.extend(md.entry_points(group=group))
    return found


class PluginRegistry:
    """The loaded plugins and what they provide.

    sol-core keeps one process-wide registry (`registry()`); tests build their
    own from hand-made entry points through `sol.testing`.
    """

    def __init__(self, entry_points: Iterable[EntryPointLike] | None = None) -> None:
        self.manager = pluggy.PluginManager(PROJECT_NAME)
        self.manager.add_hookspecs(SolSpecs)
        self.infos: dict[tuple[str, str], PluginInfo] = {}
        self.backends: dict[str, Backend] = {}
        self.frontends: dict[str, Frontend] = {}
        self.config_keys: list[ConfigKey] = []
        self.deploy_targets: dict[str, DeployTarget] = {}
        eps = installed_entry_points() if entry_points is None else list(entry_points)
        self._load_all(eps)

    # -- public views ------------------------------------------------------
    def plugins(self) -> list[PluginInfo]:
        return sorted(self.infos.values(), key=lambda p: (p.kind, p.name, p.distribution))

    # -- loading -----------------------------------------------------------
    def _load_all(self, entry_points: Sequence[EntryPointLike]) -> None:
        candidates = [self._candidate(ep) for ep in entry_points if ep.group in GROUPS]
        by_name: dict[tuple[str, str], list[_Candidate]] = {}
        for cand in candidates:
            by_name.setdefault((cand.kind, cand.entry_point.name), []).append(cand)

        allow, block = _env_list("SOL_LOAD_PLUGINS"), _env_list("SOL_DISABLE_PLUGINS")
        for (kind, name), group in sorted(by_name.items()):
            distinct = {c.distribution for c in group}
            if len(group) > 1 and len(distinct) > 1:
                dists = " and ".join(sorted(f"{c.distribution} {c.version}" for c in group))
                reason = (
                    f"the {kind} name {name!r} is claimed by {dists}; uninstall one of them "
                    "(neither is loaded while both are installed)"
                )
                for cand in group:
                    self._fail(cand, reason)
                continue
            cand = group[0]  # the same distribution listed twice (e.g. via sys.path) is one plugin
            lname = name.lower()
            if (block is not None and lname in block) or (allow is not None and lname not in allow):
                why = "SOL_DISABLE_PLUGINS" if block is not None and lname in block else "SOL_LOAD_PLUGINS"
                self._record(cand, status="disabled", error=f"disabled by {why}")
                continue
            self._load_one(cand)

    def _candidate(self, ep: EntryPointLike) -> _Candidate:
        dist = getattr(ep, "dist", None)
        if dist is not None:
            dist_name = dist.metadata["Name"] or "?"
            return _Candidate(ep, GROUPS[ep.group], dist_name, dist.version, tuple(dist.requires or ()))
        return _Candidate(ep, GROUPS[ep.group], "<no distribution>", "", ())

    def _record(self, cand: _Candidate, status: str, error: str = "", hooks: tuple[str, ...] = ()) -> PluginInfo:
        info = PluginInfo(
            name=cand.entry_point.name,
            kind=cand.kind,
            distribution=cand.distribution,
            version=cand.version,
            status=status,
            error=error,
            hooks=hooks,
            module=cand.entry_point.value,
        )
        self.infos[(cand.kind, f"{cand.entry_point.name}@{cand.distribution}")] = info
        return info

    def _fail(self, cand: _Candidate, reason: str, exc: BaseException | None = None) -> None:
        self._record(cand, status="error", error=reason)
        line = f"{cand.kind} plugin {cand.entry_point.name!r} ({cand.distribution} {cand.version}) disabled: {reason}"
        if strict():
            raise SolPluginError(line) from exc
        _log.warning(line)

    def _load_one(self, cand: _Candidate) -> None:
        ep, name = cand.entry_point, cand.entry_point.name
        if name != name.lower() or not name.replace("_", "").replace("-", "").isalnum():
            return self._fail(cand, f"plugin names are lower-case identifiers; {name!r} is not")
        mismatch = _core_requirement_mismatch(cand.requires)
        if mismatch:
            return self._fail(cand, mismatch)
        try:
            module = ep.load()
        except Exception as exc:  # a broken plugin must never break `import sol`
            return self._fail(cand, f"import of {ep.value!r} failed: {type(exc).__name__}: {exc}", exc)
        try:
            self.manager.register(module, name=f"{cand.kind}:{name}")
        except Exception as exc:  # pluggy.PluginValidationError, or a double registration
            return self._fail(cand, f"hook validation failed: {exc}", exc)
        unknown = self._hooks_without_spec(module)
        if unknown:
            self.manager.unregister(module)
            return self._fail(
                cand,
                f"implements {', '.join(unknown)} which no SOL hook spec defines "
                "(misspelled, or written for a newer sol-core?)",
            )
        try:
            provided = self._collect(module, cand)
        except Exception as exc:
            self.manager.unregister(module)
            return self._fail(cand, f"hook validation failed: {exc}", exc)
        backends, frontends, keys, targets = provided
        self.backends.update(backends)
        self.deploy_targets.update(targets)
        self.frontends.update(frontends)
        self.config_keys.extend(keys)
        self._record(cand, status="ok", hooks=tuple(sorted(_hook_names(self.manager, module))))

    def _hooks_without_spec(self, module: ModuleType) -> list[str]:
        unknown = []
        for hook_name in _hook_names(self.manager, module):
            caller = getattr(self.manager.hook, hook_name, None)
            if caller is None or caller.spec is None:
                unknown.append(hook_name)
        return sorted(unknown)

    def _collect(self, module: ModuleType, cand: _Candidate) -> tuple[
            dict[str, Backend], dict[str, Frontend], list[ConfigKey], dict[str, DeployTarget]]:
        """Call this plugin's hooks once and validate every record it returns."""
        name = cand.entry_point.name
        backends: dict[str, Backend] = {}
        frontends: dict[str, Frontend] = {}
        keys: list[ConfigKey] = []
        targets: dict[str, DeployTarget] = {}

        def call(hook: str) -> list[Any]:
            fn = getattr(module, hook, None)
            if fn is None or hook not in _hook_names(self.manager, module):
                return []
            result = fn()
            if result is None:
                return []
            try:
                return list(result)
            except TypeError:
                raise SolPluginError(f"{hook}() must return an iterable, got {type(result).__name__}") from None

        def records(hook: str, record_type: type, kind: str | None) -> list[Any]:
            """The hook's records, each of the right type, from a plugin of the right group."""
            found = call(hook)
            for record in found:
                if not isinstance(record, record_type):
                    raise SolPluginError(f"{hook}() returned {record!r}, which is not a sol.records.{record_type.__name__}")
                if kind is not None and cand.kind != kind:
                    raise SolPluginError(f"{hook}() is implemented by a plugin in the sol.{cand.kind}s group")
            return found

        def claim(store: dict[str, Any], what: str, claimed: str, record: Any) -> None:
            """A record named after the plugin, and only one per plugin."""
            if claimed != name:
                raise SolPluginError(f"{what} name {claimed!r} does not match its entry-point name {name!r}")
            if claimed in store:
                raise SolPluginError(f"{what} {claimed!r} is returned twice")
            store[claimed] = record

        for backend in records("sol_backends", Backend, "backend"):
            claim(backends, "backend", backend.name, backend)
            if not backend.description:
                raise SolPluginError(f"backend {name!r} has no description")
            if name in self.backends:
                raise SolPluginError(f"backend {name!r} is already provided by another plugin")
        for frontend in records("sol_frontends", Frontend, "frontend"):
            claim(frontends, "frontend", frontend.name, frontend)
        for key in records("sol_config_keys", ConfigKey, None):
            if key.component != name:
                raise SolPluginError(f"config key {key.name!r} must be named '{name}::...'")
            keys.append(key)
        for target in records("sol_deploy_targets", DeployTarget, "backend"):
            claim(targets, "deploy target", target.device_type, target)
            if not target.description or not target.install_hint:
                raise SolPluginError(f"deploy target {name!r} needs a description and an install_hint")
            bad = [key for key in target.options if "::" not in key]
            if bad:
                raise SolPluginError(f"deploy target {name!r} declares options without a component: {', '.join(bad)}")
        if cand.kind == "backend" and not backends:
            raise SolPluginError("a plugin in the sol.backends group must return a backend from sol_backends()")
        if cand.kind == "frontend" and not frontends:
            raise SolPluginError("a plugin in the sol.frontends group must return a frontend from sol_frontends()")
        return backends, frontends, keys, targets


def _hook_names(manager: pluggy.PluginManager, module: ModuleType) -> list[str]:
    callers = manager.get_hookcallers(module) or []
    return [c.name for c in callers]


def _core_requirement_mismatch(requires: Sequence[str]) -> str:
    """Why this plugin's declared sol-core requirement excludes us, or ''."""
    for raw in requires:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if req.name.lower().replace("_", "-") != CORE_DISTRIBUTION:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.specifier and not req.specifier.contains(Version(__version__), prereleases=True):
            return (
                f"requires sol-core{req.specifier} but sol-core {__version__} is installed; "
                "install a matching version of the plugin or of sol-core"
            )
    return ""


# -- the process-wide registry ------------------------------------------------

_REGISTRY: PluginRegistry | None = None
_AFTER_LOAD: list[Callable[[], None]] = []


def registry() -> PluginRegistry:
    """The process-wide registry, loaded on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = PluginRegistry()
        while _AFTER_LOAD:
            callback = _AFTER_LOAD.pop(0)
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - a plugin's follow-up must not fail the registry
                _log.warning(f"plugin callback {getattr(callback, '__qualname__', callback)!r} failed: {exc}")
    return _REGISTRY


def after_load(callback: Callable[[], None]) -> None:
    """Run ``callback`` once the process-wide registry is loaded (now, if it is).

    Plugin modules are imported while the registry loads, when sol.config, the cache and the devices cannot be used
    yet (each would load the registry again); work that needs them waits here (sol-backend-ve starts PyTorch's VE
    device this way when SOL's plugins load in a PyTorch process).
    """
    if _REGISTRY is not None:
        callback()
    else:
        _AFTER_LOAD.append(callback)


def set_registry(new: PluginRegistry | None) -> PluginRegistry | None:
    """Swap the process-wide registry (None: rediscover on next use). Returns the old one."""
    global _REGISTRY
    old, _REGISTRY = _REGISTRY, new
    import sol  # the device cache and plugin config keys belong to the registry

    from .devices import forget

    forget()
    sol.config.forget_plugin_keys()
    return old


def plugins() -> list[PluginInfo]:
    """Every discovered plugin with its status, as records."""
    return registry().plugins()


def import_plugin_module(path: str) -> Any:
    """Resolve 'package.module:attr' (used by the out-of-process prober)."""
    module_name, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj
