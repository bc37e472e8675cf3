"""The plugin loader survives every kind of broken plugin and reports it."""

from __future__ import annotations

import textwrap

import pytest
import sol
from sol.devices import dump
from sol.errors import SolPluginError
from sol.testing import FakeEntryPoint, isolated_registry
from sol.testing.plugins import make_module

GOOD_BACKEND = """
import sol
from sol.records import Backend, Device, ProbeResult

class GoodBackend(Backend):
    name = "{name}"
    description = "A test device"

    def probe(self):
        return ProbeResult(devices=(Device("{name}", 0, "Test Device 0", "{name}", {{"cores": 4}}),))

    def versions(self):
        return {{"testcc": "1.2.3"}}

@sol.hookimpl
def sol_backends():
    return [GoodBackend()]

@sol.hookimpl
def sol_config_keys():
    from sol.records import ConfigKey
    return [ConfigKey("{name}::queues", int, 2, "Number of queues.")]
"""


def good(name: str = "gooddev", **kw) -> FakeEntryPoint:
    module = make_module(f"_sol_test_{name}_{kw.get('distribution', 'x').replace('-', '_')}", GOOD_BACKEND.format(name=name))
    return FakeEntryPoint(name, module, **kw)


def broken(name: str, source: str, **kw) -> FakeEntryPoint:
    return FakeEntryPoint(name, make_module(f"_sol_test_{name}", textwrap.dedent(source)), **kw)


class _Raising(FakeEntryPoint):
    def load(self):
        raise ImportError("libfoo.so: cannot open shared object file")


def status(reg, name: str):
    return [p for p in reg.plugins() if p.name == name]


def test_good_plugin_is_loaded_and_reported():
    with isolated_registry([good()]) as reg:
        (info,) = status(reg, "gooddev")
        assert info.status == "ok" and info.kind == "backend"
        assert set(info.hooks) == {"sol_backends", "sol_config_keys"}
        devices = sol.devices(print_dump=False)
        assert [d.id for d in devices] == ["gooddev:0"]
        assert sol.device.gooddev.name == "gooddev"
        assert sol.config["gooddev::queues"] == 2
        assert sol.versions()["gooddev:testcc"] == "1.2.3"


def test_plugin_raising_on_import_is_disabled(capsys):
    ep = _Raising("crashy", "crashy_mod", distribution="sol-backend-crashy")
    with isolated_registry([ep, good()]) as reg:
        (info,) = status(reg, "crashy")
        assert info.status == "error"
        assert "ImportError" in info.error and "libfoo.so" in info.error
        # everything else keeps working
        assert [d.id for d in sol.devices(print_dump=False)] == ["gooddev:0"]
        assert "crashy: plugin error (sol-backend-crashy)" in dump()
    lines = [line for line in capsys.readouterr().err.splitlines() if "'crashy'" in line]
    assert len(lines) == 1 and "disabled: import of 'crashy_mod' failed" in lines[0]


def test_strict_mode_reraises(monkeypatch):
    monkeypatch.setenv("SOL_STRICT_PLUGINS", "1")
    with pytest.raises(SolPluginError, match="crashy"):
        with isolated_registry([_Raising("crashy", "crashy_mod")]):
            pass


def test_hook_validation_failure():
    # pluggy rejects an implementation asking for an argument the spec lacks
    ep = broken("badargs", """
        import sol
        @sol.hookimpl
        def sol_backends(device_count):
            return []
    """)
    with isolated_registry([ep]) as reg:
        (info,) = status(reg, "badargs")
        assert info.status == "error" and "hook validation failed" in info.error
        assert "device_count" in info.error


def test_hook_without_spec_is_reported():
    ep = broken("typo", """
        import sol
        from sol.records import Backend, ProbeResult
        class B(Backend):
            name = "typo"
            description = "d"
            def probe(self): return ProbeResult(reason="none")
        @sol.hookimpl
        def sol_backends(): return [B()]
        @sol.hookimpl
        def sol_backend_flavour(): return None
    """)
    with isolated_registry([ep]) as reg:
        (info,) = status(reg, "typo")
        assert info.status == "error"
        assert "sol_backend_flavour" in info.error and "no SOL hook spec" in info.error
        assert "typo" not in reg.backends


def test_wrong_record_is_rejected():
    ep = broken("liar", """
        import sol
        from sol.records import Backend, ProbeResult
        class B(Backend):
            name = "somethingelse"
            description = "d"
            def probe(self): return ProbeResult(reason="none")
        @sol.hookimpl
        def sol_backends(): return [B()]
    """)
    with isolated_registry([ep]) as reg:
        (info,) = status(reg, "liar")
        assert info.status == "error" and "does not match its entry-point name" in info.error


def test_other_sol_core_version_is_refused():
    ep = good("olddev", requires=["sol-core==0.0.1", "numpy"])
    with isolated_registry([ep]) as reg:
        (info,) = status(reg, "olddev")
        assert info.status == "error"
        assert "requires sol-core==0.0.1" in info.error and sol.__version__ in info.error
        assert not reg.backends


def test_matching_range_is_accepted():
    ep = good("rangedev", requires=["sol-core>=0.1,<1"])
    with isolated_registry([ep]) as reg:
        assert status(reg, "rangedev")[0].status == "ok"


def test_two_distributions_claiming_one_name():
    a = good("dupdev", distribution="sol-backend-dup-a")
    b = good("dupdev", distribution="sol-backend-dup-b")
    with isolated_registry([a, b]) as reg:
        infos = status(reg, "dupdev")
        assert len(infos) == 2
        for info in infos:
            assert info.status == "error"
            assert "sol-backend-dup-a" in info.error and "sol-backend-dup-b" in info.error
        assert "dupdev" not in reg.backends


def test_disable_and_allow_lists(monkeypatch):
    monkeypatch.setenv("SOL_DISABLE_PLUGINS", "gooddev")
    with isolated_registry([good(), good("otherdev")]) as reg:
        assert status(reg, "gooddev")[0].status == "disabled"
        assert "SOL_DISABLE_PLUGINS" in status(reg, "gooddev")[0].error
        assert status(reg, "otherdev")[0].status == "ok"
    monkeypatch.delenv("SOL_DISABLE_PLUGINS")
    monkeypatch.setenv("SOL_LOAD_PLUGINS", "otherdev")
    with isolated_registry([good(), good("otherdev")]) as reg:
        assert status(reg, "gooddev")[0].status == "disabled"
        assert list(reg.backends) == ["otherdev"]


def test_probe_exception_becomes_reason():
    ep = broken("flaky", """
        import sol
        from sol.records import Backend
        class B(Backend):
            name = "flaky"
            description = "d"
            def probe(self): raise RuntimeError("driver exploded")
        @sol.hookimpl
        def sol_backends(): return [B()]
    """)
    with isolated_registry([ep]):
        assert sol.devices(print_dump=False) == []
        assert "driver exploded" in dump()


HANGING = """
import sol, time
from sol.records import Backend, ProbeResult
class HangingBackend(Backend):
    name = "hang"
    description = "a driver that hangs"
    probe_timeout = 1.0
    def probe(self):
        time.sleep(60)
        return ProbeResult()
@sol.hookimpl
def sol_backends(): return [HangingBackend()]
"""


def test_hanging_probe_times_out(tmp_path, monkeypatch):
    # out-of-process probes import the backend class by module path
    (tmp_path / "sol_test_hang.py").write_text(HANGING)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with isolated_registry([FakeEntryPoint("hang", "sol_test_hang")]):
        assert sol.devices(print_dump=False) == []
        assert "timed out after 1 s" in dump()


def test_device_set_and_get():
    with isolated_registry([good(), good("otherdev")]):
        assert sol.device.get().id == "gooddev:0"  # no x86: first device
        assert sol.device.set(sol.device.otherdev, 0).id == "otherdev:0"
        assert sol.device.get().id == "otherdev:0"
        with pytest.raises(sol.errors.SolDeviceError, match="no device otherdev:3"):
            sol.device.set("otherdev", 3)
        with pytest.raises(sol.errors.SolDeviceError, match="unknown device type 'nope'"):
            sol.device.set("nope")
        with pytest.raises(AttributeError, match="installed: gooddev, otherdev"):
            sol.device.nope  # noqa: B018


def test_after_load_waits_for_the_process_registry(monkeypatch):
    """Plugin modules import while the registry loads; what needs sol.config waits for after_load."""
    import importlib

    plugins = importlib.import_module("sol.plugins")  # sol.plugins is also the function sol.plugins()
    calls: list[str] = []
    monkeypatch.setattr(plugins, "_REGISTRY", None)
    monkeypatch.setattr(plugins, "_AFTER_LOAD", [])
    monkeypatch.setattr(plugins, "PluginRegistry", lambda: calls.append("loaded") or object())
    plugins.after_load(lambda: calls.append("first"))
    plugins.after_load(lambda: 1 / 0)  # a failing callback is logged, the registry still loads
    plugins.after_load(lambda: calls.append("second"))
    assert calls == []
    plugins.registry()
    assert calls == ["loaded", "first", "second"]
    plugins.after_load(lambda: calls.append("now"))  # loaded: runs at once
    assert calls[-1] == "now"


HOST_CPU = """
import sol
from sol.records import Backend, Device, ProbeResult
class HostCpu(Backend):
    name = "mycpu"
    description = "a host CPU type"
    host = True
    def probe(self): return ProbeResult(devices=(Device("mycpu", 0, "My CPU", "mycpu"),))
@sol.hookimpl
def sol_backends(): return [HostCpu()]
"""
ACCELERATOR = """
import sol
from sol.records import Backend, Device, ProbeResult
class Accelerator(Backend):
    name = "myaccel"
    description = "a device whose tensors a framework holds"
    framework_devices = {"pytorch": "privateuseone"}
    def probe(self): return ProbeResult(devices=(Device("myaccel", 0, "My accelerator", "myaccel"),))
@sol.hookimpl
def sol_backends(): return [Accelerator()]
"""


def test_the_core_reads_device_roles_from_the_backends():
    """Which device type is the host CPU is the backends' declaration (Backend.host), not a name the core knows: a
    third-party host CPU type is the default device even where another backend sorts first, and builds without a
    device record; an unknown type names the installed backends."""
    from sol.compiler import _resolve_device, flavour_for, host_types

    with isolated_registry([broken("mycpu", HOST_CPU), broken("myaccel", ACCELERATOR)]):
        assert host_types() == ("mycpu",)
        assert sol.device.get().id == "mycpu:0"  # "myaccel" sorts first, but is no host
        assert _resolve_device("mycpu:0") is None  # host code: no device record needed
        flavour, index = flavour_for("mycpu:0")
        assert flavour.name == "mycpu" and index == 0
        with pytest.raises(sol.errors.SolDeviceError, match="installed backends are myaccel, mycpu"):
            flavour_for("nope")
        with pytest.raises(sol.errors.SolDeviceError, match="not a host CPU type"):
            flavour_for("myaccel")
