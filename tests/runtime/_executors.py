"""A ProcessExecutor started for a test and always closed (children reaped) afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from conveyor_sdk._runtime.executor import ProcessExecutor


@contextlib.asynccontextmanager
async def running(ex: ProcessExecutor) -> AsyncIterator[ProcessExecutor]:
    """Spawn ``ex``'s children, wait until they are ready, yield it; abort and close it on the way out."""
    ex.spawn()
    try:
        await ex.start(lambda: None)
        yield ex
    finally:
        ex.abort("test over")
        await ex.close(0)
