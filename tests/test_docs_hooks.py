"""docs/plugin_hooks.md documents every hookspec with its exact signature."""

import inspect
from pathlib import Path

from flyautotune import hookspecs

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugin_hooks.md"


def specs():
    return {n: f for n, f in vars(hookspecs).items() if n.startswith("flyautotune_") and callable(f)}


def test_the_contract_has_ten_hooks():
    assert sorted(specs()) == sorted([
        "flyautotune_target", "flyautotune_validate_hints", "flyautotune_lower_compile_hints",
        "flyautotune_cache_key", "flyautotune_benchmark", "flyautotune_register_adopters",
        "flyautotune_store", "flyautotune_tuning_event", "flyautotune_report_targets",
        "flyautotune_compile_report",
    ])


def test_every_hookspec_is_documented_with_its_signature():
    text = DOC.read_text()
    for name, fn in specs().items():
        sig = f"{name}{inspect.signature(fn)}".replace("'", "")  # annotations are strings
        assert sig in text, f"docs/plugin_hooks.md lacks `{sig}`"


def test_firstresult_hooks_are_marked_in_docs_and_specs():
    text = DOC.read_text()
    for name, fn in specs().items():
        opts = getattr(fn, "flyautotune_spec")
        if opts.get("firstresult"):
            assert "Stops at first non-None result." in " ".join(fn.__doc__.split())
            section = text.split(f"## `{name}`", 1)[1].split("\n## ", 1)[0]
            assert "first non-None" in section, name
