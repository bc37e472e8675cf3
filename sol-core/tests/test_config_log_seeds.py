"""sol.config, SOL's log format, seeds and sol.input."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sol
from sol.errors import SolConfigError


@pytest.fixture(autouse=True)
def _fresh_config():
    yield
    sol.config.reset()
    from sol.seeds import DEFAULT_SEED

    sol.set_seed(DEFAULT_SEED)


def test_defaults_and_types():
    assert sol.config["compiler::debug"] is False
    sol.config["compiler::debug"] = True
    assert sol.config["compiler::debug"] is True
    sol.config["compiler::name"] = "resnet"
    assert sol.config["compiler::name"] == "resnet"
    del sol.config["compiler::debug"]
    assert sol.config["compiler::debug"] is False
    assert "autotuning" in list(sol.config)


def test_unknown_key_suggests_closest():
    with pytest.raises(SolConfigError) as err:
        sol.config["compiler::debgu"]
    assert "'compiler::debug'" in str(err.value)
    with pytest.raises(KeyError):  # still a KeyError for code that expects one
        sol.config["nothing::like_this"] = 1


def test_wrong_type_names_key_and_type():
    with pytest.raises(SolConfigError, match=r"'compiler::debug' takes a bool, got int 1"):
        sol.config["compiler::debug"] = 1
    with pytest.raises(SolConfigError, match="must be one of"):
        sol.config["log::level"] = "LOUD"


def test_log_level_and_format(capsys):
    sol.config["log::level"] = "debug"
    assert sol.config["log::level"] == "DEBUG"
    sol.log.get("compiler").debug("hello %s", "world")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("[SOL +") and "s compiler] DEBUG" in err and err.endswith("hello world")
    sol.config["log::level"] = "WARNING"
    sol.log.get("compiler").debug("quiet")
    assert "quiet" not in capsys.readouterr().err


def test_sol_log_env_enables_trace():
    code = "import sol; sol.log.get('test').log(sol.log.TRACE, 'tracing'); print(sol.config['log::level'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"SOL_LOG": "TRACE", "PATH": "/usr/bin:/bin"}, check=True)
    assert done.stdout.strip() == "TRACE"
    assert "test] TRACE   tracing" in done.stderr


def test_seed_scopes():
    sol.set_seed(7)
    assert sol.seed() == 7 and sol.seed("x86") == 7 and sol.seed("x86", 0) == 7
    sol.set_seed(8, "x86")
    sol.set_seed(9, "x86", 1)
    assert (sol.seed("x86", 0), sol.seed("x86", 1), sol.seed("ve")) == (8, 9, 7)
    assert sol.seeds() == {"global": 7, "x86": 8, "x86:1": 9}
    sol.set_seed(10, "x86")  # a type seed resets that type's device seeds
    assert sol.seed("x86", 1) == 10
    sol.set_seed(11)  # the global seed resets everything narrower
    assert sol.seeds() == {"global": 11}
    with pytest.raises(TypeError):
        sol.set_seed(1.5)
    with pytest.raises(sol.errors.SolDeviceError):
        sol.seed(None, 0)


def test_input_spec():
    spec = sol.input([0, 3, 224, 224])
    assert spec.shape == (0, 3, 224, 224) and spec.wildcard_dims == (0,) and not spec.requires_grad
    with pytest.raises(ValueError, match="more than one wildcard"):
        sol.input([0, 0, 3])
    with pytest.raises(ValueError, match="negative"):
        sol.input([-1, 3])
