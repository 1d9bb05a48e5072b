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


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        ("_worker/driver.py", "conveyor_sdk._worker.runner"),
        ("_runtime/live.py", "conveyor_sdk._runtime.supervisor"),
    ],
)
def test_no_import_back_to_the_module_that_runs_it(lower: str, upper: str) -> None:
    """The driver and the live view take protocols (WorkerHost, LiveSource), not their owner's class,
    so neither imports back the module that imports it (not even under TYPE_CHECKING)."""
    assert _hits(SDK / lower, {upper}) == []


@pytest.mark.parametrize(
    "path", [p for p in _py(SDK) if p != SDK / "__init__.py"], ids=lambda p: str(p.relative_to(SDK))
)
def test_inner_modules_read_the_version_from_its_leaf_module(path: Path) -> None:
    """``__version__`` lives in ``conveyor_sdk/_version.py``; no inner module imports the package for it."""
    assert "conveyor_sdk.__version__" not in _imports(path)


def test_the_package_version_is_the_leaf_modules() -> None:
    import conveyor_sdk
    from conveyor_sdk import _version

    assert conveyor_sdk.__version__ == _version.__version__


PACKAGES = {  # import name -> folder (setup.py renames cli/ and conformance/)
    "conveyor_sdk": ROOT / "conveyor_sdk",
    "conveyor_server_min": ROOT / "conveyor_server_min",
    "conveyor_cli": ROOT / "cli",
    "conveyor_conformance": ROOT / "conformance",
}


def _module_files() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for name, folder in PACKAGES.items():
        for path in _py(folder):
            parts = (name, *path.relative_to(folder).with_suffix("").parts)
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _module_edges(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Our modules ``name`` imports anywhere (TYPE_CHECKING and function bodies included).

    ``from pkg import sub`` counts as importing ``pkg.sub`` only, not the package's ``__init__``.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in mods else base)
    return {m for m in found if m in mods and m != name}


def test_no_two_modules_import_each_other() -> None:
    """No pair of our modules imports each other, not even under TYPE_CHECKING: the lower one takes a
    protocol of what it uses (WorkerHost, LiveSource, PeerConn, StreamOwner, ...)."""
    mods = _module_files()
    edges = {name: _module_edges(name, path, mods) for name, path in mods.items()}
    circles = sorted((a, b) for a, deps in edges.items() for b in deps if a < b and a in edges[b])
    assert len(mods) > 150 and sum(map(len, edges.values())) > 500  # the scan sees the code base
    assert circles == []
