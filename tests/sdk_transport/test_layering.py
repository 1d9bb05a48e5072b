"""The transport's protocol pieces (core, status mapping) stay sans-I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parents[2] / "conveyor_sdk"
TRANSPORT = SDK / "_transport"
SANS_IO = [TRANSPORT / n for n in ("core.py", "_status.py", "options.py")] + [
    SDK / "_h2kernel" / n
    for n in (
        "client.py",
        "client_fast.py",
        "client_answer.py",
        "server.py",
        "server_conn.py",
        "guard.py",
        "hpackfast.py",
        "walker.py",
    )
]
IO = {"asyncio", "socket", "ssl", "selectors", "time", "threading"}


@pytest.mark.parametrize("path", SANS_IO, ids=lambda p: p.name)
def test_sans_io_modules_import_no_io(path: Path) -> None:
    """core.py, _status.py, options.py and the HTTP/2 kernel's connection modules import no asyncio,
    sockets, TLS or clock."""
    name = path.name
    tree = ast.parse(path.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported & IO == set()
    assert "h2" in imported or name != "core.py"
