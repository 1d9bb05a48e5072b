"""End-to-end encryption cost: seal + open per KiB of payload, next to the no-encryption path.

Run:  .venv/bin/python bench/encryption_bench.py [--repeat 7]

In one process, for payloads of 64 B .. 256 KiB, it times:

* ``plain``: building the EnqueueRequest for the payload (validation + bytes, no sealing)
  plus the worker-side check that finds no marker: what every task pays without encryption;
* ``sealed``: the same request sealed with a :class:`~conveyor_sdk.encryption.Keyring`
  (AES-256-GCM, fresh nonce) plus opening it on the worker side (``open_task``);
* ``crypto``: ``Keyring.encrypt`` + ``Keyring.decrypt`` alone.

Figures are microseconds per task (median of ``--repeat`` runs), the added cost, and the
AES-GCM throughput (bytes sealed plus bytes opened per second).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk._client.requests import enqueue as build_request  # noqa: E402
from conveyor_sdk._client.seal import seal_request_sync  # noqa: E402
from conveyor_sdk._worker.unseal import open_task  # noqa: E402
from conveyor_sdk.codecs import CodecRegistry  # noqa: E402
from conveyor_sdk.encryption import Key, Keyring  # noqa: E402
from conveyor_sdk.worker import TaskData  # noqa: E402

SIZES = (64, 1024, 16 * 1024, 256 * 1024)
OPTIONS = {"content_type": "application/octet-stream", "queue": "bench"}


def run_now(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a coroutine that never suspends (a sync encryptor) without an event loop's overhead."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the coroutine suspended")


def per_call(fn: object, number: int, repeat: int) -> float:
    runs = timeit.repeat(fn, number=number, repeat=repeat)  # type: ignore[arg-type]
    return statistics.median(runs) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    ring, codecs = Keyring(Key("bench", os.urandom(32))), CodecRegistry.default()

    def task_of(payload: bytes, metadata: dict[str, str]) -> TaskData:
        return TaskData("t", "bench", "b", payload, "application/octet-stream", metadata, 0, 3)

    def plain(payload: bytes) -> None:
        req = build_request("b", payload, OPTIONS, codecs, trace=False)
        seal_request_sync(req, None)
        run_now(open_task(task_of(req.payload, dict(req.metadata)), None))

    def sealed(payload: bytes) -> None:
        req = build_request("b", payload, OPTIONS, codecs, trace=False)
        seal_request_sync(req, ring)
        run_now(open_task(task_of(req.payload, dict(req.metadata)), ring))

    head = ("payload", "plain us", "sealed us", "added us", "crypto us", "crypto MB/s")
    print("{:>9} {:>10} {:>10} {:>9} {:>10} {:>12}".format(*head))
    for size in SIZES:
        payload = os.urandom(size)
        number = min(3000, max(100, 4_000_000 // size))
        before = per_call(lambda p=payload: plain(p), number, args.repeat)
        after = per_call(lambda p=payload: sealed(p), number, args.repeat)
        crypto = per_call(lambda p=payload: ring.decrypt(ring.encrypt(p)), number, args.repeat)
        rate = 2 * size / crypto  # bytes per microsecond, sealed and opened = MB/s
        print(f"{size:>8}B {before:10.2f} {after:10.2f} {after - before:9.2f} {crypto:10.2f} {rate:12.0f}")


if __name__ == "__main__":
    main()
