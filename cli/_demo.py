"""``conveyor worker --demo``: run the app module's ``demo(client)`` producer against the worker's server.

It lives in the CLI, not the runtime: the runtime sits on the worker layer and never imports a
client (CONTRIBUTING.md, "Layers"); the supervisor only calls what it is given, with the URL.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["demo_producer"]

log = logging.getLogger("conveyor.runtime")


def demo_producer(app_spec: str, token: str | None) -> Callable[[str], Awaitable[None]]:
    """The supervisor's ``demo`` hook for ``app_spec``: given the server URL, runs ``demo(client)``."""

    async def run(url: str) -> None:
        from conveyor_sdk.client import Client

        module = importlib.import_module(app_spec.partition(":")[0])
        producer: Callable[[Any], Awaitable[None]] | None = getattr(module, "demo", None)
        if producer is None:
            log.warning("--demo: module %s has no demo(client) function", module.__name__)
            return
        async with Client(url, token=token) as client:
            log.info("demo producer running")
            await producer(client)

    return run
