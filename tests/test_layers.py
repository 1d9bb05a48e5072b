"""Layers never import upward, and the sans-I/O protocol layer imports no I/O, clock or asyncio."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SDK = ROOT / "conveyor_sdk"

IO_MODULES = {"asyncio", "socket", "ssl", "selectors", "threading", "time", "subprocess", "multiprocessing"}
ABOVE_PROTOCOL = {
    "conveyor_sdk._transport",
    "conveyor_sdk._worker",
    "conveyor_sdk._runtime",
    "conveyor_sdk.client",
    "conveyor_sdk.app",
    "conveyor_sdk.worker",
}
ABOVE_TRANSPORT = ABOVE_PROTOCOL - {"conveyor_sdk._transport"}
APPS = {"conveyor_cli", "conveyor_conformance"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _hits(path: Path, forbidden: set[str]) -> list[str]:
    return sorted(
        name for name in _imports(path) for bad in forbidden if name == bad or name.startswith(bad + ".")
    )


def _py(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "_gen" not in p.parts)


@pytest.mark.parametrize("path", [*_py(SDK / "_protocol"), SDK / "errors.py"], ids=lambda p: p.name)
def test_protocol_layer_is_sans_io(path: Path) -> None:
    """Protocol modules import no asyncio/sockets/clock and nothing from higher layers."""
    assert _hits(path, IO_MODULES | ABOVE_PROTOCOL | APPS | {"conveyor_server_min"}) == []


@pytest.mark.parametrize("path", _py(SDK / "_transport") if (SDK / "_transport").exists() else [], ids=str)
def test_transport_does_not_import_the_runtime(path: Path) -> None:
    """Transport modules never import the worker runtime, facades, server or CLI."""
    assert _hits(path, ABOVE_TRANSPORT | APPS | {"conveyor_server_min"}) == []


@pytest.mark.parametrize("path", _py(SDK), ids=lambda p: str(p.relative_to(SDK)))
def test_sdk_never_imports_cli_or_conformance(path: Path) -> None:
    """The SDK does not depend on the CLI or the conformance suite."""
    assert _hits(path, APPS) == []


def test_the_scan_sees_imports() -> None:
    """Sanity: the AST scan reports a forbidden import when there is one."""
    assert _hits(SDK / "_protocol" / "framing.py", {"conveyor_sdk.errors"}) != []
