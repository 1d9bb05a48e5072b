"""Every python block in docs/migrating.md runs against a real reference server."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor_sdk.testing import start_server
from conveyor_server_min.testing import ServerProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.fixture(scope="module")
def migrating_server() -> Iterator[ServerProcess]:
    """One server for the doc's snippets."""
    server = start_server()
    yield server
    server.stop()


def test_the_doc_has_its_snippets() -> None:
    """Sanity: the extraction finds every section's snippet."""
    assert len(BLOCKS) == 8


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{n}" for n in range(len(BLOCKS))])
def test_snippet_runs(code: str, migrating_server: ServerProcess) -> None:
    """The snippet's main(url) runs and its assertions hold."""
    namespace: dict[str, Any] = {"__name__": "migrating_snippet"}
    exec(compile(code, str(DOC), "exec"), namespace)
    asyncio.run(namespace["main"](migrating_server.url))
