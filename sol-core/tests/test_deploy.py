"""sol.deploy's driver with a toy deploy target (the host's g++): libraries, headers, weights, symbols, errors.

The zoo models are deployed for real targets in sol-backend-x86's and
sol-backend-arm64's tests; here a small graph (conv + BatchNorm, so the
prepare program computes derived parameters at init) keeps every build short.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sol
from sol.errors import SolBuildError, SolDeviceError, SolInputError
from sol.ir import BATCH, Dim, Graph, Purpose
from sol.ir.interpret import run_reference
from sol.testing import FakeEntryPoint, isolated_registry
from sol.testing.deployment import DeployedRunError, run_deployed
from sol.testing.plugins import make_module

PLUGIN = '''
import sol
from sol.records import Backend, DeployTarget, ProbeResult


class HostBackend(Backend):
    name = "hostcpu"
    description = "the build machine's CPU (test)"

    def probe(self):
        return ProbeResult(reason="test backend")


class HostTarget(DeployTarget):
    device_type = "hostcpu"
    description = "the build machine (g++)"
    install_hint = "apt install g++"
    options = {"gcc::march": "x86-64", "gcc::mtune": "generic"}
    notes = ("the generated code needs only libc, libm and libgomp",)
    compiler_argv = ["g++"]

    def compiler(self):
        return list(self.compiler_argv)

    def flavour(self, options):
        from sol.codegen import CpuFlavour

        return CpuFlavour("hostcpu")

    def emulator(self):
        return []


@sol.hookimpl
def sol_backends():
    return [HostBackend()]


@sol.hookimpl
def sol_deploy_targets():
    return [HostTarget()]
'''

API = ("net", "net_init", "net_seed", "sol_ext_free", "sol_ext_malloc")


@pytest.fixture(scope="module")
def plugin():
    return make_module("sol_test_deploy_plugin", PLUGIN)


@pytest.fixture
def registry(plugin):
    with isolated_registry([FakeEntryPoint("hostcpu", plugin, distribution="sol-backend-hostcpu")]) as reg:
        yield reg


def rand(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def conv_bn(batch: object = 2) -> Graph:
    g = Graph("conv_bn")
    x = g.add_input("x", [Dim(batch, Purpose.N), Dim(3, Purpose.C), Dim(8, Purpose.P), Dim(8, Purpose.P)])  # type: ignore[arg-type]
    w = g.add_param("conv.weight", rand(4, 3, 3, 3))
    (y,) = g.add_layer("conv", [x, w], {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1),
                                        "groups": 1}, name="conv")
    bn = [g.add_param("bn.running_mean", rand(4)), g.add_param("bn.running_var", np.abs(rand(4)) + 0.5),
          g.add_param("bn.weight", rand(4)), g.add_param("bn.bias", rand(4))]
    (z,) = g.add_layer("batch_norm", [y, *bn], {"eps": 1e-5}, name="bn")
    (r,) = g.add_layer("relu", [z], name="relu")
    (t,) = g.add_layer("tanh", [z], name="tanh")
    g.outputs = [r, t]
    return g


def deploy(path: Path, **kwargs):
    kwargs.setdefault("func_name", "net")
    kwargs.setdefault("lib_name", "libnet")
    return sol.deploy(conv_bn(), device="hostcpu", path=path, **kwargs)


def check_outputs(result, directory: Path) -> None:
    x = rand(2, 3, 8, 8)
    expected = run_reference(conv_bn(), [x])
    got, _ = run_deployed(result, [x], directory)
    assert len(got) == 2
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_shared_library_header_and_outputs(registry, tmp_path, capsys):
    result = deploy(tmp_path)
    assert result.library == tmp_path.resolve() / "libnet.so" and result.kind == "shared"
    assert result.symbols == API
    assert result.weights is None
    header = result.header.read_text()
    assert "void net(void* ctx, const float* in0, float** out0, float** out1);" in header
    assert "void net_init(int deviceIdx);" in header and "int net_seed(int seed);" in header
    assert "void* sol_ext_malloc(size_t bytes);" in header and "void sol_ext_free(void* ptr);" in header
    assert "in0: float32 [2, 3, 8, 8]" in header and "out1: float32 [2, 4, 8, 8]" in header
    dynamic = subprocess.run(["nm", "-D", "--defined-only", str(result.library)], capture_output=True, text=True,
                             check=True).stdout
    assert sorted(line.split()[-1] for line in dynamic.splitlines()) == sorted(API)
    assert "libgomp" in " ".join(result.runtime_libraries)
    printed = capsys.readouterr().out
    assert "sol.deploy: shared library for hostcpu" in printed and "needs at run time" in printed
    check_outputs(result, tmp_path)


def test_static_library_exports_only_the_api(registry, tmp_path, capsys):
    result = deploy(tmp_path, target="lib::static")
    assert result.library.name == "libnet.a" and result.symbols == API
    symbols = subprocess.run(["nm", "-P", "-g", "--defined-only", str(result.library)], capture_output=True,
                             text=True, check=True).stdout
    assert sorted(line.split()[0] for line in symbols.splitlines() if not line.endswith(":")) == sorted(API)
    assert "-lgomp" in result.link_flags
    assert "link:" in capsys.readouterr().out
    check_outputs(result, tmp_path)


def test_weights_in_a_separate_file(registry, tmp_path, monkeypatch):
    result = deploy(tmp_path, options={"weights": "file"})
    assert result.weights == tmp_path.resolve() / "libnet.weights"
    assert result.library.stat().st_size < result.weights.stat().st_size + 200_000
    check_outputs(result, tmp_path)  # found beside the library
    moved = tmp_path / "elsewhere.weights"
    result.weights.rename(moved)
    with pytest.raises(DeployedRunError, match="cannot open the weights file .*NET_WEIGHTS"):
        run_deployed(result, [rand(2, 3, 8, 8)], tmp_path)
    monkeypatch.setenv("NET_WEIGHTS", str(moved))
    check_outputs(result, tmp_path)  # found through the environment variable
    moved.write_bytes(b"SOLWGT01" + bytes(100))
    with pytest.raises(DeployedRunError, match="is not the weights file of this library"):
        run_deployed(result, [rand(2, 3, 8, 8)], tmp_path)


def test_original_sol_dargs_form(registry, tmp_path):
    result = sol.deploy(conv_bn(), target="lib::shared", dargs={
        "lib_name": "libold", "func_name": "predict", "path": str(tmp_path), "device_type": "hostcpu",
        "host_type": "hostcpu"})
    assert result.library.name == "libold.so" and "predict_init" in result.symbols


def test_gcc_options_become_flags(registry, tmp_path):
    result = deploy(tmp_path, options={"gcc::march": "x86-64-v2"})
    assert "-march=x86-64-v2" in result.compile_flags and "-mtune=generic" in result.compile_flags
    assert "-march=x86-64-v2" in result.header.read_text()


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"target": "lib::dynamic"}, SolInputError, "unknown deploy target 'lib::dynamic'; use one of lib::shared"),
    ({"options": {"gcc::mach": "x"}}, SolInputError, "did you mean 'gcc::march'"),
    ({"options": {"weights": "inline"}}, SolInputError, "use one of embedded, file"),
    ({"func_name": "2fast"}, SolInputError, "must be a C identifier"),
    ({"lib_name": "a/b"}, SolInputError, "plain file name"),
    ({"host_device": "x86"}, SolDeviceError, "host_device must be None or 'hostcpu'"),
    ({"dargs": {"libname": "x"}}, SolInputError, "unknown dargs key"),
])
def test_argument_errors(registry, tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        deploy(tmp_path, **kwargs)


def test_unknown_device_type_names_the_backend_package(registry, tmp_path):
    with pytest.raises(SolDeviceError, match=r"no target for device type 've'.*pip install sol-backend-ve"):
        sol.deploy(conv_bn(), device="ve", path=tmp_path)


def test_backend_without_a_deploy_target_is_named(plugin, tmp_path):
    other = make_module("sol_test_deploy_other", "import sol\nfrom sol.records import Backend, ProbeResult\n"
                        "class B(Backend):\n    name = 'other'\n    description = 'no deploy'\n"
                        "    def probe(self):\n        return ProbeResult()\n"
                        "@sol.hookimpl\ndef sol_backends():\n    return [B()]\n")
    with isolated_registry([FakeEntryPoint("hostcpu", plugin), FakeEntryPoint("other", other)]):
        with pytest.raises(SolDeviceError, match="other backend is installed but cannot build sol.deploy libraries"):
            sol.deploy(conv_bn(), device="other", path=tmp_path)


def test_missing_compiler_names_the_package(registry, plugin, tmp_path, monkeypatch):
    monkeypatch.setattr(plugin.HostTarget, "compiler_argv", ["no-such-cross-g++"])
    with pytest.raises(SolBuildError, match="needs no-such-cross-g\\+\\+.*apt install g\\+\\+"):
        deploy(tmp_path)


def test_wildcard_batch_is_refused_without_an_example(registry, tmp_path):
    with pytest.raises(SolInputError, match="fixed shapes"):
        sol.deploy(conv_bn(batch=BATCH), device="hostcpu", path=tmp_path)
    with pytest.raises(SolInputError, match="no wildcard 0"):
        sol.deploy(conv_bn(batch=BATCH), [0, 3, 8, 8], device="hostcpu", path=tmp_path)


def test_wildcard_batch_graph_is_built_for_the_example_batch(registry, tmp_path):
    # ONNX models often declare a symbolic batch; the library is built for the example's.
    x = rand(3, 3, 8, 8)
    result = sol.deploy(conv_bn(batch=BATCH), x, device="hostcpu", path=tmp_path, func_name="net", lib_name="libnet")
    assert result.inputs[0].shape == (3, 3, 8, 8) and result.outputs[1].shape == (3, 4, 8, 8)
    got, _ = run_deployed(result, [x], tmp_path)
    for g, e in zip(got, run_reference(conv_bn(batch=BATCH), [x]), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_sol_deploy_stays_callable_after_importing_the_module():
    import sol.deployment as module

    assert callable(sol.deploy) and sol.deploy is not module
    assert module.DeployResult is not None


BAD_TARGETS = {
    "wrong name": ("sol.backends", "class T(DeployTarget):\n    device_type = 'other'\n    description = 'x'\n"
                   "    install_hint = 'x'\n", "does not match its entry-point name"),
    "not a record": ("sol.backends", "T = object\n", "not a sol.records.DeployTarget"),
    "frontend": ("sol.frontends", "class T(DeployTarget):\n    device_type = 'bad'\n    description = 'x'\n"
                 "    install_hint = 'x'\n", "sol.frontends group"),
}


@pytest.mark.parametrize("case", sorted(BAD_TARGETS))
def test_invalid_deploy_targets_disable_the_plugin(case):
    group, body, reason = BAD_TARGETS[case]
    source = ("import sol\nfrom sol.records import Backend, DeployTarget, Frontend, ProbeResult\n" + body +
              "class B(Backend):\n    name = 'bad'\n    description = 'bad'\n"
              "    def probe(self):\n        return ProbeResult()\n"
              "class F(Frontend):\n    name = 'bad'\n    def accepts(self, model):\n        return False\n"
              "@sol.hookimpl\ndef sol_backends():\n    return [B()]\n"
              "@sol.hookimpl\ndef sol_frontends():\n    return [F()]\n"
              "@sol.hookimpl\ndef sol_deploy_targets():\n    return [T()]\n")
    module = make_module(f"sol_test_bad_target_{case.replace(' ', '_')}", source)
    if group == "sol.backends":
        del module.sol_frontends
    else:
        del module.sol_backends
    with isolated_registry([FakeEntryPoint("bad", module, group=group)]) as reg:
        (info,) = reg.plugins()
        assert info.status == "error" and reason in info.error
        assert "bad" not in reg.deploy_targets


def test_hook_docstring_example_is_a_valid_target():
    from sol.hookspecs import SolSpecs

    doc = SolSpecs.sol_deploy_targets.__doc__ or ""
    example = doc.split("Example::", 1)[1]
    module = make_module("sol_test_doc_example", "\n".join(line[12:] for line in example.splitlines()))
    (target,) = module.sol_deploy_targets()
    assert target.option_flags({}) == ["-march=mydev2", "-mtune=generic"]
    assert target.tool("nm") == "mydev-linux-gnu-nm"
    assert os.path.basename(target.compiler()[0]) == "mydev-linux-gnu-g++"


def test_static_link_flags_follow_the_undefined_symbols():
    from sol.codegen.standalone_build import libraries_for

    assert libraries_for(["memcpy", "posix_memalign"]) == []
    assert libraries_for(["dladdr", "expf", "GOMP_parallel", "_ZdlPv", "pthread_once"]) == [
        "-lgomp", "-lstdc++", "-lm", "-lpthread", "-ldl"]


GLUE_WITH_INLINE_STATICS = r'''
#pragma GCC visibility push(default)
inline int& shared_counter() { static int count = 40; return count; }  // default visibility, like libstdc++'s
#pragma GCC visibility pop
struct Attr { int value; Attr() : value(1) {} };
inline const Attr& default_attr() { static const Attr attr; return attr; }  // hidden, with a guard variable
extern "C" int glue_call() { return ++shared_counter() + default_attr().value; }
'''


def test_static_library_localises_the_unique_symbols_of_its_objects(tmp_path):
    """g++ makes the static locals of inline functions STB_GNU_UNIQUE, which objcopy does not localise by itself."""
    from sol.codegen.standalone_build import build_library
    from sol.records import DeployLibraries, DeployTarget

    class Gxx(DeployTarget):
        device_type = "hostcpu"
        install_hint = "apt install g++"

        def compiler(self):
            return ["g++"]

    glue = tmp_path / "glue.cpp"
    glue.write_text(GLUE_WITH_INLINE_STATICS)
    obj = tmp_path / "glue.o"
    subprocess.run(["g++", "-O2", "-fPIC", "-fvisibility=hidden", "-c", str(glue), "-o", str(obj)], check=True)
    unique = subprocess.run(["nm", "-P", "--defined-only", str(obj)], capture_output=True, text=True, check=True)
    assert sum(line.split()[1] == "u" for line in unique.stdout.splitlines()) == 3  # two statics and a guard
    source = tmp_path / "build" / "api.cpp"
    source.parent.mkdir()
    source.write_text('extern "C" int glue_call();\n'
                      'extern "C" __attribute__((visibility("default"))) int api() { return glue_call(); }\n')
    built = build_library(Gxx(), {}, source, tmp_path / "libapi.a", "static", ["api"], "libapi",
                          DeployLibraries(objects=(obj,)))
    assert built.symbols == ("api",)
    main = tmp_path / "main.c"
    main.write_text('int api(void);\nint main(void) { return api() == 42 ? 0 : 1; }\n')
    subprocess.run(["gcc", str(main), str(built.path), *built.link_flags[1:], "-o", str(tmp_path / "main")],
                   check=True)
    assert subprocess.run([str(tmp_path / "main")], check=False).returncode == 0
