"""``conveyor conformance worker``: our SDK's worker program for the cross-SDK contract.

Environment contract (the one the upstream suite uses for every SDK's worker):

* ``CONVEYOR_ADDR`` server URL;
* ``QUEUE`` the queue to serve; ``SLEEP_MS`` how long handlers sleep;
* ``SCENARIO``: ``sleep`` (serve until SIGTERM, then drain and exit 0) or
  ``bad-hello`` (build a worker with a zero queue weight: exit 1 when the SDK
  refuses it locally, 2 when it accepted it);
* type ``conformance:task`` sleeps SLEEP_MS *ignoring cancellation* (a blocking
  sleep in a thread, like the Go program's ``time.Sleep``); ``conformance:batch`` is
  a batch handler doing the same.

Extensions, declared by the line this program prints before it connects
(``conveyor-conformance: supports ...``, see :mod:`conveyor_conformance.declare`):
``CONCURRENCY`` (default 4), ``CONVEYOR_TOKEN``, ``DRAIN_GRACE_S`` (default 5); types
``conformance:cancellable`` (sleeps SLEEP_MS, stops when cancelled),
``conformance:fail`` (raises with the payload's ``marker`` in the message),
``conformance:skip`` (SkipRetry), ``conformance:json`` (decodes the payload by its
content_type and returns it re-encoded as the result bytes).

Not part of any contract: ``CONVEYOR_PROTOCOL`` (``grpc``, default, or ``connect``)
picks this SDK's session protocol, so the suite can be run against both.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

EXIT_REFUSED = 1
EXIT_ACCEPTED = 2
EXIT_BROKEN = 3

__all__ = ["DECLARATION", "EXIT_ACCEPTED", "EXIT_REFUSED", "build_registry", "main"]


DECLARATION = (
    "conveyor-conformance: supports CONCURRENCY CONVEYOR_TOKEN DRAIN_GRACE_S "
    "conformance:cancellable conformance:fail conformance:skip conformance:json"
)


async def _sleep(ctx: Any, sleep_ms: int) -> None:
    """Sleep cooperatively: stop early when the core cancels the execution."""
    try:
        await asyncio.wait_for(ctx.until_cancelled(), sleep_ms / 1000)
    except TimeoutError:
        return
    ctx.raise_if_cancelled()


def _marker(payload: bytes) -> str:
    """The ``marker`` field of a JSON payload ('' when there is none)."""
    try:
        value = json.loads(payload or b"{}")
    except ValueError:
        return ""
    return str(value.get("marker", "")) if isinstance(value, dict) else ""


def build_registry(sleep_ms: int) -> Any:
    """The handlers of the contract (plus the sdk.* extensions)."""
    from conveyor_sdk.codecs import CodecRegistry
    from conveyor_sdk.worker import Registry, SkipRetry

    reg = Registry()
    codecs = CodecRegistry.default()

    @reg.handler("conformance:task")
    def task(_task: Any, _ctx: Any) -> None:
        time.sleep(sleep_ms / 1000)  # ignores cancellation on purpose (upstream contract)

    @reg.batch_handler("conformance:batch")
    def batch(_tasks: Any, _ctx: Any) -> None:
        time.sleep(sleep_ms / 1000)

    @reg.handler("conformance:cancellable")
    async def cancellable(_task: Any, ctx: Any) -> None:
        await _sleep(ctx, sleep_ms)

    @reg.handler("conformance:fail", decode=lambda t: t.payload)
    async def fail(payload: bytes, _ctx: Any) -> None:
        raise RuntimeError(f"conformance: handler raised {_marker(payload)}")

    @reg.handler("conformance:skip")
    async def skip(_task: Any, _ctx: Any) -> None:
        raise SkipRetry("conformance: permanent failure")

    @reg.handler("conformance:json", decode=lambda t: codecs.decode(t.payload, t.content_type))
    async def echo(value: Any, _ctx: Any) -> bytes:
        return codecs.encode(value, "application/json")[0]

    return reg


def _worker(env: Mapping[str, str], queues: dict[str, int]) -> Any:
    from conveyor_sdk._transport import TLSOptions
    from conveyor_sdk.worker import Worker

    ca_file = env.get("CONVEYOR_CA_FILE") or None
    return Worker(
        env["CONVEYOR_ADDR"],
        queues=queues,
        concurrency=int(env.get("CONCURRENCY", "4")),
        token=env.get("CONVEYOR_TOKEN") or None,
        grace=float(env.get("DRAIN_GRACE_S", "5")),
        protocol="connect" if env.get("CONVEYOR_PROTOCOL", "grpc") == "connect" else "grpc",
        tls=TLSOptions(ca_file=ca_file) if ca_file else None,
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
    print(DECLARATION, flush=True)
    worker.run_sync(reg)  # installs SIGTERM/SIGINT handlers: drain, close the stream, return
    return 0


if __name__ == "__main__":
    sys.exit(main())
