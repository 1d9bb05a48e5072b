"""A failure inside the HTTP/2 kernel's fast path is reported as ours, and later calls take the public path.

The fault is made the way a renamed h2 internal would show itself at run time: code of the fast
path raises AttributeError. Against a real reference server, in-process over in-memory connections
(the fault is in the client's read, which is the same code over a socket).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from conveyor_sdk._h2kernel import client_fast, probe
from conveyor_sdk.client import RetryConfig
from conveyor_sdk.errors import Internal, Unavailable
from conveyor_sdk.testing.memory import MemoryServer
from tests._h2paths import FAST_ONLY

pytestmark = FAST_ONLY


@pytest.fixture
def broken_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's fast response read fails as if h2 had renamed an internal (restored afterwards)."""

    def renamed(conn: Any, data: bytes) -> Any:
        raise AttributeError("'H2Connection' object has no attribute '_inbound_flow_control_window_manager'")

    monkeypatch.setattr(client_fast, "_take_response_frames", renamed)
    monkeypatch.setattr(probe, "fast", True)
    monkeypatch.setattr(probe, "reason", None)
    monkeypatch.setattr(probe, "_warned", False)


def test_a_fast_path_failure_is_our_internal_error_and_the_next_call_takes_the_public_path(
    memory: Callable[..., MemoryServer], broken_read: None, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> tuple[BaseException, str]:
        async with memory() as server, server.client(retry=RetryConfig(attempts=1)) as client:
            with pytest.raises(Exception) as failed:
                await client.enqueue("kernel:fault", {"i": 0})
            assert not probe.fast  # every later connection takes h2's public path
            again = await client.enqueue("kernel:fault", {"i": 1})
            return failed.value, again.id

    with caplog.at_level(logging.WARNING, logger="conveyor.h2kernel"):
        error, task_id = asyncio.run(main())
    assert isinstance(error, Internal) and not isinstance(error, Unavailable)
    assert "h2 4." in error.message and "not the server's" in error.message
    assert "undecodable" not in error.message
    assert task_id
    warnings = [r for r in caplog.records if r.name == "conveyor.h2kernel"]
    assert len(warnings) == 1 and "public API" in warnings[0].getMessage()
