"""The layer map is kept (tests/_layers.py, CONTRIBUTING.md "Layers"), statically; no import circles."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests._layers import (
    MAY_IMPORT,
    ROOT,
    imported_names,
    layer_of,
    layer_violations,
    module_edges,
    module_files,
    python_files,
)

SDK = ROOT / "conveyor_sdk"


def test_every_module_keeps_to_the_layer_map() -> None:
    """protocol <- transport (the HTTP/2 kernel) <- worker <- runtime; the client beside the worker,
    never importing it; the server on protocol, kernel and its engine; CLI, dashboard, conformance,
    ``app`` and ``testing`` on top (CONTRIBUTING.md, "Layers"). Every import counts: module level,
    ``if TYPE_CHECKING:``, function bodies and ``importlib.import_module("...")``."""
    mods = module_files()
    assert len(mods) > 150  # the scan sees the code base
    assert layer_violations(mods) == []


def test_every_layer_is_populated() -> None:
    """The map names real code: each layer holds modules (a rename that empties one fails here)."""
    places = {layer_of(name) for name in module_files()}
    assert places == set(MAY_IMPORT)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_scan_catches_each_kind_of_violation(tmp_path: Path) -> None:
    """A synthetic tree with one violation of each rule, hidden where a module-level scan misses it."""
    _write(
        tmp_path / "sdk",
        {
            "__init__.py": "",
            "errors.py": "",
            "_protocol/__init__.py": "",
            "_protocol/hidden.py": """
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from conveyor_sdk._worker.registry import Registry
                def later():
                    import asyncio
                    from ..client import Client
            """,
            "_transport/__init__.py": "",
            "_transport/session.py": "",
            "_transport/_h2.py": "from conveyor_sdk import errors\n",
            "_worker/__init__.py": "",
            "_worker/registry.py": "from conveyor_sdk._transport import _h2\nimport conveyor_sdk.errors\n",
            "client.py": "def f():\n    from conveyor_sdk.worker import Worker\n",
            "worker.py": "from conveyor_sdk._worker.registry import Registry\n",
            "_runtime/__init__.py": "",
            "_runtime/late.py": "import importlib\nimportlib.import_module('conveyor_sdk.client')\n",
            "_brand_new.py": "",
        },
    )
    _write(
        tmp_path / "server",
        {
            "__init__.py": "",
            "wire.py": "from conveyor_sdk._transport._h2 import x\nfrom conveyor_sdk.errors import E\n",
            "rpc.py": "from conveyor_sdk._transport.session import SessionStream\n",
            "main.py": "def main():\n    import typer\n",
        },
    )
    mods = module_files({"conveyor_sdk": tmp_path / "sdk", "conveyor_server_min": tmp_path / "server"})
    assert sorted(layer_violations(mods)) == [
        "conveyor_sdk._brand_new: not in the layer map (tests/_layers.py PLACES)",
        "conveyor_sdk._protocol.hidden (protocol) imports asyncio",
        "conveyor_sdk._protocol.hidden (protocol) imports conveyor_sdk._worker.registry (worker)",
        "conveyor_sdk._protocol.hidden (protocol) imports conveyor_sdk.client (client)",
        "conveyor_sdk._runtime.late (runtime) imports conveyor_sdk.client (client)",
        "conveyor_sdk.client (client) imports conveyor_sdk.worker (worker)",
        "conveyor_server_min.main (server) imports typer",
        "conveyor_server_min.rpc (server) imports conveyor_sdk._transport.session (worker side)",
    ]


def test_a_new_kernel_package_sits_at_the_transport_level() -> None:
    """The h2 kernel (its own package or inside _transport) is below the worker, client and server."""
    assert layer_of("conveyor_sdk._h2kernel.client") == layer_of("conveyor_sdk._transport._h2") == "transport"
    assert {"worker", "client", "server"} <= {p for p, ok in MAY_IMPORT.items() if "transport" in ok}


def test_sdk_never_imports_cli_or_conformance() -> None:
    """The SDK (app and testing included) does not depend on the CLI or the conformance suite."""
    mods = module_files()
    hits = [
        f"{name} -> {dep}"
        for name, path in mods.items()
        if name.split(".")[0] == "conveyor_sdk"
        for dep in module_edges(name, path, mods)
        if dep.split(".")[0] in {"conveyor_cli", "conveyor_conformance"}
    ]
    assert hits == []


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
    name = "conveyor_sdk." + lower.removesuffix(".py").replace("/", ".")
    assert upper not in module_edges(name, SDK / lower, module_files())


@pytest.mark.parametrize(
    "path",
    [p for p in python_files(SDK) if p != SDK / "__init__.py"],
    ids=lambda p: str(p.relative_to(SDK)),
)
def test_inner_modules_read_the_version_from_its_leaf_module(path: Path) -> None:
    """``__version__`` lives in ``conveyor_sdk/_version.py``; no inner module imports the package for it."""
    name = "conveyor_sdk." + ".".join(path.relative_to(SDK).with_suffix("").parts)
    assert "conveyor_sdk.__version__" not in imported_names(name.removesuffix(".__init__"), path)


def test_the_package_version_is_the_leaf_modules() -> None:
    import conveyor_sdk
    from conveyor_sdk import _version

    assert conveyor_sdk.__version__ == _version.__version__


def test_no_two_modules_import_each_other() -> None:
    """No pair of our modules imports each other, not even under TYPE_CHECKING: the lower one takes a
    protocol of what it uses (WorkerHost, LiveSource, PeerConn, StreamOwner, ...)."""
    mods = module_files()
    edges = {name: module_edges(name, path, mods) for name, path in mods.items()}
    circles = sorted((a, b) for a, deps in edges.items() for b in deps if a < b and a in edges[b])
    assert len(mods) > 150 and sum(map(len, edges.values())) > 500  # the scan sees the code base
    assert circles == []
