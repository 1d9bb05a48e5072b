"""Interop fixtures: conveyord started by the tests themselves, on ports picked at runtime.

Every test here carries the ``interop`` marker. Without ``CONVEYORD`` (the path of a conveyord
binary, built by ``build-conveyord.sh``; see docs/interop.md) each is skipped with one reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.interop._conveyord import Conveyord

SKIP_REASON = "CONVEYORD is not set to a conveyord binary (docs/interop.md says how to build one)"
HERE = Path(__file__).parent


def binary() -> str | None:
    path = os.environ.get("CONVEYORD")
    return path if path and os.access(path, os.X_OK) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this folder's tests ``interop``; skip them all, with one reason, without a binary."""
    skip = pytest.mark.skip(
        reason=SKIP_REASON
        if not os.environ.get("CONVEYORD")
        else f"CONVEYORD={os.environ.get('CONVEYORD')} is not an executable file"
    )
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.interop)
            if binary() is None:
                item.add_marker(skip)


def start_node(**kwargs: object) -> Conveyord:
    """A started node; a port taken between picking and binding costs a retry with new ports."""
    path = binary()
    assert path is not None
    last: Exception | None = None
    for _ in range(3):
        node = Conveyord(path, **kwargs)  # type: ignore[arg-type]
        try:
            node.start()
            return node
        except RuntimeError as exc:
            node.stop()
            if "address already in use" not in str(exc):
                raise
            last = exc
    raise AssertionError(f"conveyord did not start: {last}")


@pytest.fixture
def node_factory() -> Iterator[Callable[..., Conveyord]]:
    """Start conveyord nodes; each is stopped at teardown."""
    started: list[Conveyord] = []

    def make(**kwargs: object) -> Conveyord:
        node = start_node(**kwargs)
        started.append(node)
        return node

    yield make
    for node in started:
        node.stop()


@pytest.fixture(scope="module")
def conveyord() -> Iterator[Conveyord]:
    """One in-memory conveyord (auth off, lease 2 s, reap 500 ms) shared by a test module."""
    node = start_node()
    yield node
    node.stop()


@pytest.fixture(scope="module")
def cv_url(conveyord: Conveyord) -> str:
    """API URL of the module's conveyord."""
    return conveyord.url
