"""Every hook, hook argument and config key is documented (the reference is generated from them)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import sol
from sol import reference
from sol.hookspecs import SolSpecs

REPO = Path(__file__).resolve().parents[2]


def test_every_hook_has_description_example_and_arguments():
    assert reference.hook_specs(), "no hooks found"
    assert reference.undocumented_hooks() == []


def test_undocumented_argument_is_detected(monkeypatch):
    def sol_fake_hook(self, device):
        """Does things.

        Example::

            pass
        """

    monkeypatch.setattr(SolSpecs, "sol_fake_hook", sol_fake_hook, raising=False)
    assert reference.undocumented_hooks() == ["sol_fake_hook(device)"]


def test_hook_examples_compile():
    for name, fn in reference.hook_specs().items():
        example = inspect.getdoc(fn).partition("Example::")[2]
        compile(inspect.cleandoc(example), f"<{name} example>", "exec")


def test_every_config_key_is_documented_and_listed():
    table = reference.config_reference_markdown()
    for name, key in sol.config.schema.items():
        assert key.doc.strip(), f"config key {name} has no doc"
        assert f"| `{name}` |" in table


@pytest.mark.skipif(not (REPO / "mkdocs.yml").exists(), reason="not a repository checkout (docs/ absent)")
def test_reference_pages_are_in_the_site():
    nav = (REPO / "mkdocs.yml").read_text()
    assert "configuration.md" in nav and "hook-reference.md" in nav
    assert "<!-- sol:config-reference -->" in (REPO / "docs" / "configuration.md").read_text()
    assert "<!-- sol:hook-reference -->" in (REPO / "docs" / "hook-reference.md").read_text()


def test_the_device_runtime_contract_is_documented():
    assert reference.undocumented_device_runtime() == []
    text = reference.device_runtime_reference_markdown()
    for name in reference.DEVICE_RUNTIME_RECORDS:
        assert f"## `sol.records.{name}`" in text
    for method in ("alloc", "copy_to_device", "copy_to_host", "copy_on_device", "load", "function", "launch",
                   "synchronize", "address"):
        assert f"- `{method}(" in text, method
    if (REPO / "docs").is_dir():
        assert "<!-- sol:device-runtime-reference -->" in (REPO / "docs" / "hook-reference.md").read_text()
        assert (REPO / "docs" / "../sol-core/src/sol/testing/loopback.py").is_file()
