"""The worked example in docs/testing.md runs, with the fixtures loaded through the pytest11 entry point."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
ROOT = DOC.parents[1]


def _example() -> str:
    blocks = re.findall(r"```python\n(# test_shop.py\n.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/testing.md must have one '# test_shop.py' block"
    return blocks[0]


def test_plugin_is_registered_as_an_entry_point() -> None:
    """pip install is enough: pytest11 names conveyor_sdk.testing.plugin."""
    names = {ep.value for ep in entry_points(group="pytest11")}
    assert "conveyor_sdk.testing.plugin" in names


def test_docs_example_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test in the doc's block passes in a fresh pytest run."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the examples package, as in a checkout
    pytester.makepyfile(test_shop=_example())
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=4)
