"""ScriptedPeer.aclose leaves no socket behind when a client connects while it closes."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings
from typing import Any

import pytest

from conveyor_sdk.testing import ScriptedPeer


async def _connect_then_close(turns: int, problems: list[str]) -> None:
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, ctx: problems.append(str(ctx.get("message"))))
    peer = ScriptedPeer()
    await peer.__aenter__()
    host, port = peer.url.split("://")[1].rsplit(":", 1)
    client = socket.create_connection((host, int(port)))  # completes in the kernel's backlog
    try:
        for _ in range(turns):  # the accept lands this many loop turns before aclose
            await asyncio.sleep(0)
        await peer.aclose()
    finally:
        client.close()


@pytest.mark.parametrize("turns", range(6))
def test_a_connection_accepted_as_the_peer_closes_is_closed_with_it(turns: int) -> None:
    """Whichever loop turn the accept falls in, no socket is left unclosed and asyncio reports nothing."""
    problems: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(_connect_then_close(turns, problems))
        gc.collect()
    leaks: list[Any] = [w.message for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == [] and problems == [], (leaks, problems)
