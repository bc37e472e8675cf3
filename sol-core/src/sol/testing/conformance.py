"""Conformance tests every SOL backend passes.

Subclass `BackendConformance` in a backend package's tests and set
``backend_name``; pytest collects the inherited tests. They check what
sol-core relies on: discovery through the installed entry point, a valid
record, a probe that never raises and explains an empty result, devices
numbered 0..n-1 of the right type, a version report of plain strings,
namespaced config keys, the public API (`sol.devices()`,
`sol.device.<type>`, `sol.device.set`) working with the backend, and
precisions (`sol.precision`) either computed or refused with a SOL error.
"""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from ..devices import device as device_namespace
from ..devices import dump, probe
from ..plugins import registry
from ..records import Backend, ConfigKey, Device, ProbeResult


class BackendConformance:
    """Base class: set ``backend_name`` to the backend's entry-point name."""

    backend_name: ClassVar[str] = ""

    @pytest.fixture
    def backend(self) -> Backend:
        if not self.backend_name:
            pytest.fail(f"{type(self).__name__} must set backend_name")
        reg = registry()
        info = [p for p in reg.plugins() if p.kind == "backend" and p.name == self.backend_name]
        assert info, f"no installed plugin in the sol.backends group is named {self.backend_name!r}"
        assert info[0].status == "ok", f"plugin {self.backend_name!r} failed to load: {info[0].error}"
        return reg.backends[self.backend_name]

    def test_record_is_valid(self, backend: Backend) -> None:
        assert isinstance(backend, Backend)
        assert backend.name == self.backend_name
        assert backend.name == backend.name.lower()
        assert backend.description.strip(), "a backend needs a human-readable description"
        if backend.probe_timeout is not None:
            assert backend.probe_timeout > 0

    def test_plugin_implements_backends_hook(self) -> None:
        info = next(p for p in registry().plugins() if p.kind == "backend" and p.name == self.backend_name)
        assert "sol_backends" in info.hooks
        assert info.distribution and info.version

    def test_probe_never_raises_and_explains_absence(self, backend: Backend) -> None:
        result = probe(backend)
        assert isinstance(result, ProbeResult)
        if not result.devices:
            assert result.reason.strip(), "an empty probe must say why (driver missing, wrong machine, ...)"
        assert not result.reason.startswith("probe failed"), result.reason

    def test_devices_are_numbered_and_typed(self, backend: Backend) -> None:
        for index, dev in enumerate(probe(backend).devices):
            assert isinstance(dev, Device)
            assert (dev.type, dev.index, dev.backend) == (self.backend_name, index, self.backend_name)
            assert dev.name.strip()
            json.dumps(dev.to_dict())  # properties must be plain data

    def test_probe_in_process_matches_record_contract(self, backend: Backend) -> None:
        # The out-of-process prober re-creates the class without arguments.
        if backend.probe_timeout is not None:
            type(backend)()

    def test_versions_are_strings(self, backend: Backend) -> None:
        versions = backend.versions()
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in versions.items())

    def test_config_keys_are_namespaced(self) -> None:
        for key in registry().config_keys:
            assert isinstance(key, ConfigKey)
        import sol

        for name in sol.config:
            if name.startswith(self.backend_name + "::"):
                assert sol.config.doc(name).strip(), f"config key {name} needs a doc string"

    def test_public_api_sees_backend(self, backend: Backend) -> None:
        import sol

        assert getattr(sol.device, self.backend_name).name == self.backend_name
        text = dump()
        assert f"{self.backend_name}: " in text
        devices = sol.devices(print_dump=False)
        assert [d for d in devices if d.type == self.backend_name] == list(probe(backend).devices)

    def test_device_selection(self, backend: Backend) -> None:
        devs = probe(backend).devices
        if not devs:
            with pytest.raises(Exception, match=self.backend_name):
                device_namespace.set(self.backend_name, 0)
            return
        previous = device_namespace.get()
        try:
            chosen = device_namespace.set(self.backend_name, len(devs) - 1)
            assert device_namespace.get() == chosen
        finally:
            if previous is not None:
                device_namespace.set(previous.type, previous.index)

    def test_precisions_are_computed_or_refused(self) -> None:
        """Each reduced precision either resolves or raises SolUnsupportedError naming the device; "auto" resolves
        to one the flavour computes; fp32 always works."""
        from ..compiler import flavour_for
        from ..errors import SolDeviceError, SolUnsupportedError
        from ..precision import resolve

        try:
            flavour, _ = flavour_for(self.backend_name)
        except SolDeviceError as error:  # a backend that lists devices but generates no code: nothing to compute in
            assert self.backend_name in str(error)
            return
        where = f"{self.backend_name}:0"
        assert resolve("fp32", flavour, where) == "fp32"
        for wanted in ("bf16", "fp16"):
            try:
                assert resolve(wanted, flavour, where) == wanted
            except SolUnsupportedError as error:
                assert where in str(error) and wanted in str(error)
        auto = resolve("auto", flavour, where)
        assert auto in ("fp32", "bf16", "fp16") and flavour.precision_missing(auto) is None
