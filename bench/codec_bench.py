"""Payload codec benchmark: Go-exact JSON vs the plain msgspec path, and typed-enqueue validation cost.

Run:  .venv/bin/python bench/codec_bench.py [--repeat 7] [--number 20000]

In one process, for each payload shape, it times:

* ``baseline``: what the codec did before Go-exact bytes (msgspec sorted encode + the
  HTML-escape replace), i.e. the previous ``JSONCodec.encode``;
* ``codec``: today's ``JSONCodec().encode`` (same, plus the byte scan, plus the exact
  rewrite for payloads holding integral floats / exponent floats / datetimes / int keys);
* ``typed``: ``TaskDefinition.encode`` (codec + validation by a typed decode), next to
  ``typed, no check`` (the same definition with validation switched off).

Figures are microseconds per call, the median of ``--repeat`` runs of ``--number`` calls; the
baseline and codec runs alternate, so a load change on a shared machine hits both columns alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conveyor_sdk.app import App  # noqa: E402
from conveyor_sdk.codecs import JSONCodec  # noqa: E402
from conveyor_sdk.worker import TaskContext  # noqa: E402


class Order(msgspec.Struct):
    order_id: int
    email: str
    items: list[str]
    total: float


SHAPES: dict[str, Any] = {
    "small dict (ints, str)": {"user_id": 42, "email": "someone@example.com"},
    "dict, plain floats": {"price": 12.5, "rate": 0.07, "qty": 3},
    "dict, integral floats": {"price": 12.0, "rate": 1.0, "qty": 3},
    "dict with datetime": {"at": datetime(2026, 1, 2, 3, 4, 5, 100000, tzinfo=UTC), "n": 1},
    "int-keyed dict": {1: "a", 2: "b", 10: "c"},
    "1 KiB of strings": {"body": "x" * 1000, "id": "abc"},
    "1 KiB of English text": {"body": ("Please review the attached file, then reply. " * 23)[:1000], "n": 1},
    "100 floats (15 integral)": [i / 7 for i in range(100)],
}
ESCAPES = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"))


def baseline_encoder() -> Any:
    enc = msgspec.json.Encoder(order="deterministic")

    def encode(value: Any) -> bytes:
        data = enc.encode(value)
        for raw, escaped in ESCAPES:
            if raw in data:
                data = data.replace(raw, escaped)
        return data

    return encode


def per_call(fn: Any, number: int, repeat: int) -> float:
    runs = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e6


def side_by_side(before: Any, after: Any, number: int, repeat: int) -> tuple[float, float]:
    """Medians (us per call) of interleaved runs, so both sides see the same load on a shared box."""
    runs: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, out in zip((before, after), runs, strict=True):
            out.append(timeit.timeit(fn, number=number) / number * 1e6)
    return statistics.median(runs[0]), statistics.median(runs[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    base, codec = baseline_encoder(), JSONCodec()
    print(f"{'payload':28} {'baseline us':>12} {'codec us':>10} {'ratio':>6}")
    for name, value in SHAPES.items():
        try:
            base(value)
        except TypeError:  # the previous encoder refused int keys
            after = per_call(lambda v=value: codec.encode(v), args.number, args.repeat)
            print(f"{name:28} {'(refused)':>12} {after:10.2f} {'n/a':>6}")
            continue
        before, after = side_by_side(
            lambda v=value: base(v), lambda v=value: codec.encode(v), args.number, args.repeat
        )
        print(f"{name:28} {before:12.2f} {after:10.2f} {after / before:6.2f}")

    app = App(tracing=False)

    @app.task("bench:order")
    async def order(payload: Order, ctx: TaskContext) -> None: ...

    value = Order(7, "a@example.com", ["x", "y"], 19.5)
    checked = per_call(lambda: order.encode(value), args.number, args.repeat)
    order.validates = False
    unchecked = per_call(lambda: order.encode(value), args.number, args.repeat)
    print(f"\ntyped encode (Order): no check {unchecked:.2f} us, with validation {checked:.2f} us")
    print(f"validation overhead: {checked - unchecked:.2f} us per payload ({checked / unchecked:.2f}x)")


if __name__ == "__main__":
    main()
