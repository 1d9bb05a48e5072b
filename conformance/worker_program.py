"""``conveyor conformance worker``: our SDK's worker program for the cross-SDK contract.

Environment contract (the one the upstream suite uses for every SDK's worker):

* ``CONVEYOR_ADDR`` server URL, ``CONVEYOR_TOKEN`` optional bearer token;
* ``QUEUE`` the queue to serve; ``SLEEP_MS`` how long handlers sleep;
* ``SCENARIO``: ``sleep`` (serve until SIGTERM, then drain and exit 0) or
  ``bad-hello`` (build a worker with a zero queue weight: exit 1 when the SDK
  refuses it locally, 2 when it accepted it);
* type ``conformance:task`` sleeps SLEEP_MS; ``conformance:batch`` is a batch
  handler doing the same.

Extensions used by the ``sdk.*`` checks (harmless for the upstream contract):
``CONCURRENCY`` (default 4), ``DRAIN_GRACE_S`` (default 5: how long a drain lets
running handlers finish before releasing them); types ``conformance:fail`` (raises),
``conformance:skip`` (SkipRetry), ``conformance:json`` (decodes the payload by
its content_type and returns it re-encoded as the result bytes).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from typing import Any

EXIT_REFUSED = 1
EXIT_ACCEPTED = 2
EXIT_BROKEN = 3

__all__ = ["EXIT_ACCEPTED", "EXIT_REFUSED", "build_registry", "main"]


async def _sleep(ctx: Any, sleep_ms: int) -> None:
    """Sleep cooperatively: stop early when the core cancels the execution."""
    try:
        await asyncio.wait_for(ctx.until_cancelled(), sleep_ms / 1000)
    except TimeoutError:
        return
    ctx.raise_if_cancelled()


def build_registry(sleep_ms: int) -> Any:
    """The handlers of the contract (plus the sdk.* extensions)."""
    from conveyor_sdk.codecs import CodecRegistry
    from conveyor_sdk.worker import Registry, SkipRetry

    reg = Registry()
    codecs = CodecRegistry.default()

    @reg.handler("conformance:task")
    async def task(_task: Any, ctx: Any) -> None:
        await _sleep(ctx, sleep_ms)

    @reg.batch_handler("conformance:batch")
    async def batch(_tasks: Any, ctx: Any) -> None:
        await _sleep(ctx, sleep_ms)

    @reg.handler("conformance:fail")
    async def fail(_task: Any, _ctx: Any) -> None:
        raise RuntimeError("conformance: handler raised")

    @reg.handler("conformance:skip")
    async def skip(_task: Any, _ctx: Any) -> None:
        raise SkipRetry("conformance: permanent failure")

    @reg.handler("conformance:json", decode=lambda t: codecs.decode(t.payload, t.content_type))
    async def echo(value: Any, _ctx: Any) -> bytes:
        return codecs.encode(value, "application/json")[0]

    return reg


def _worker(env: Mapping[str, str], queues: dict[str, int]) -> Any:
    from conveyor_sdk.worker import Worker

    return Worker(
        env["CONVEYOR_ADDR"],
        queues=queues,
        concurrency=int(env.get("CONCURRENCY", "4")),
        token=env.get("CONVEYOR_TOKEN") or None,
        grace=float(env.get("DRAIN_GRACE_S", "5")),
    )


def _bad_hello(env: Mapping[str, str], queue: str) -> int:
    """Build a worker with a zero queue weight: 1 when the SDK refuses it, 2 when it accepts it."""
    from conveyor_sdk.errors import ConveyorError

    try:
        _worker(env, {queue: 0})
    except ImportError as exc:  # no SDK worker at all is not a refusal
        print(f"cannot build a worker: {exc}", file=sys.stderr)
        return EXIT_BROKEN
    except (ValueError, TypeError, ConveyorError) as exc:
        print(f"refused locally: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as exc:  # a crash is not a refusal (and must not exit 1 by accident)
        print(f"unexpected error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_BROKEN
    return EXIT_ACCEPTED


def main(env: Mapping[str, str] | None = None) -> int:
    """Run the program; returns the process exit code."""
    env = os.environ if env is None else env
    queue = env.get("QUEUE", "default")
    if env.get("SCENARIO", "sleep") == "bad-hello":
        return _bad_hello(env, queue)
    reg = build_registry(int(env.get("SLEEP_MS", "0")))
    worker = _worker(env, {queue: 1})
    worker.run_sync(reg)  # installs SIGTERM/SIGINT handlers: drain, close the stream, return
    return 0


if __name__ == "__main__":
    sys.exit(main())
