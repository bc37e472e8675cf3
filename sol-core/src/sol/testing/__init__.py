"""Test support for SOL and for third-party plugin authors.

A backend package proves it is a well-behaved SOL backend by subclassing
`BackendConformance` in its own tests::

    from sol.testing import BackendConformance

    class TestMyDevConformance(BackendConformance):
        backend_name = "mydev"

`FakeEntryPoint` and `isolated_registry` build a plugin registry from
hand-made entry points, so tests can load (broken) plugins without
installing anything.

`sol.testing.deployment` drives a library built by ``sol.deploy`` through a
small C program (under the target's emulator, e.g. qemu, when needed), so a
backend's tests can prove its deploy target end to end.
"""

from .conformance import BackendConformance
from .plugins import FakeEntryPoint, isolated_registry

__all__ = ["BackendConformance", "FakeEntryPoint", "isolated_registry"]
