"""The hook specifications every SOL plugin implements against.

A plugin is a module named by an entry point in the group ``sol.backends`` or
``sol.frontends``; the entry point's name is the plugin's canonical,
lower-case name (the device type for a backend). The module defines functions
decorated with ``sol.hookimpl`` whose names match the hooks below. Hooks are
always called with keyword arguments, so a spec can grow new (opt-in)
arguments without breaking existing plugins.
"""

from __future__ import annotations

from collections.abc import Iterable

import pluggy

from .records import Backend, ConfigKey, DeployTarget, Frontend

PROJECT_NAME = "sol"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class SolSpecs:
    """Hook specifications of SOL. Every hook name starts with ``sol_``."""

    @hookspec
    def sol_backends(self) -> Iterable[Backend]:
        """Return the device backends this plugin provides.

        Each backend's ``name`` must equal the plugin's entry-point name.

        Example::

            import sol
            from sol.records import Backend, Device, ProbeResult

            class MyBackend(Backend):
                name = "mydev"
                description = "My accelerator"

                def probe(self) -> ProbeResult:
                    return ProbeResult(devices=(Device("mydev", 0, "MyDev 1", "mydev"),))

            @sol.hookimpl
            def sol_backends():
                return [MyBackend()]
        """

    @hookspec
    def sol_frontends(self) -> Iterable[Frontend]:
        """Return the framework frontends this plugin provides.

        Each frontend's ``name`` must equal the plugin's entry-point name.

        Example::

            import sol
            from sol.records import Frontend

            class MyFrontend(Frontend):
                name = "myframework"
                description = "Models of MyFramework"

                def accepts(self, model) -> bool:
                    return type(model).__module__.startswith("myframework")

            @sol.hookimpl
            def sol_frontends():
                return [MyFrontend()]
        """

    @hookspec
    def sol_config_keys(self) -> Iterable[ConfigKey]:
        """Return additional ``sol.config`` keys (named ``<plugin>::<key>``).

        Example::

            import sol
            from sol.records import ConfigKey

            @sol.hookimpl
            def sol_config_keys():
                return [ConfigKey("mydev::queues", int, 2, "Number of command queues.")]
        """

    @hookspec
    def sol_deploy_targets(self) -> Iterable[DeployTarget]:
        """Return the ``sol.deploy`` targets (standalone C libraries) this backend can build.

        Each target's ``device_type`` must equal the plugin's entry-point name;
        only plugins in the ``sol.backends`` group implement this hook.

        Example::

            import sol
            from sol.records import DeployTarget

            class MyDevTarget(DeployTarget):
                device_type = "mydev"
                description = "MyDev boards, cross-compiled with mydev-linux-gnu-g++"
                install_hint = "apt install g++-mydev-linux-gnu"
                options = {"gcc::march": "mydev2", "gcc::mtune": "generic"}
                notes = ("the generated code needs no library beyond libc, libm and libgomp",)

                def compiler(self):
                    return ["mydev-linux-gnu-g++"]

                def binutils_prefix(self):
                    return "mydev-linux-gnu-"

                def flavour(self, options):
                    from sol.codegen import CpuFlavour  # lazy: importing the plugin stays cheap

                    return CpuFlavour("mydev")

            @sol.hookimpl
            def sol_deploy_targets():
                return [MyDevTarget()]
        """
