"""The transport's protocol pieces (core, status mapping) stay sans-I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TRANSPORT = Path(__file__).resolve().parents[2] / "conveyor_sdk" / "_transport"
IO = {"asyncio", "socket", "ssl", "selectors", "time", "threading"}


@pytest.mark.parametrize("name", ["core.py", "_h2.py", "_status.py", "options.py"])
def test_sans_io_modules_import_no_io(name: str) -> None:
    """core.py, _h2.py, _status.py and options.py import no asyncio, sockets, TLS or clock."""
    tree = ast.parse((TRANSPORT / name).read_text())
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
