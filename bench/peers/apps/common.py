"""What every system's handlers do, in plain stdlib (each system imports it in its own venv).

The harness reads completion from files, the same way for every system: a no-op or CPU task
appends one byte to ``$PEERS_OUT/<kind>``; a latency task appends its enqueue->start delay in
seconds (the producer's ``time.time()`` travels as the task's argument).
"""

from __future__ import annotations

import os
import time

OUT = os.environ.get("PEERS_OUT", ".")
ROUNDS = int(os.environ.get("PEERS_ROUNDS", "20000"))  # calibrated by the harness: ~5 ms here


def mark(kind: str) -> None:
    """One byte per finished task (O_APPEND: safe across processes and threads)."""
    fd = os.open(os.path.join(OUT, kind), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b".")
    finally:
        os.close(fd)


def started(sent: float) -> None:
    """Record this task's enqueue->start delay (first thing the handler does)."""
    delay = time.time() - sent
    fd = os.open(os.path.join(OUT, "lat"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{delay:.6f}\n".encode())
    finally:
        os.close(fd)


def work(rounds: int = ROUNDS) -> int:
    """Pure-Python CPU work (holds the GIL): the same loop the harness calibrates."""
    x = 0
    for i in range(rounds):
        x = (x * 31 + i) % 1000003
    return x


def cpu() -> None:
    work()
    mark("cpu")
