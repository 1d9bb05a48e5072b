"""Fixtures for transport tests: an in-thread server over a fake ServiceSet."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from conveyor_server_min.testing import ServerProcess

from .fakes import FakeServices, ThreadServer


@pytest.fixture(scope="module")
def fake_server() -> Iterator[ThreadServer]:
    """A dev-mode in-thread server (auth off) over :class:`FakeServices`."""
    with ThreadServer(FakeServices()) as server:
        yield server


@pytest.fixture(scope="module")
def auth_server() -> Iterator[ThreadServer]:
    """An in-thread server that requires ``Bearer s3cret`` or ``Bearer other``."""
    with ThreadServer(FakeServices(), dev=False, tokens=("s3cret", "other")) as server:
        yield server


@pytest.fixture
def server_proc(server_factory: Callable[..., ServerProcess]) -> Callable[..., ServerProcess]:
    """Start reference-server subprocesses (the root ``server_factory``: clean exit asserted)."""
    return server_factory
