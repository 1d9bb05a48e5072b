"""The supervisor's log handler: one write per event-loop turn, nothing reordered or lost; cached times."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time

import pytest

from conveyor_sdk._runtime.logs import JsonFormatter, TextFormatter, TurnHandler


class _Stream:
    """Records every write, so a test sees how the text was split."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered here."""


def _logger(name: str) -> tuple[logging.Logger, TurnHandler, _Stream]:
    stream = _Stream()
    handler = TurnHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger(f"tests.turn.{name}")
    log.propagate = False
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    return log, handler, stream


def test_records_of_one_turn_leave_in_one_write_after_the_turn() -> None:
    """Three records logged in one loop turn are one write, made once the turn is over, in order."""
    log, _, stream = _logger("turn")

    async def main() -> list[str]:
        for i in range(3):
            log.info("task %d succeeded", i)
        held = list(stream.writes)  # nothing written while the turn runs
        await asyncio.sleep(0)  # the turn ends; the handler's flush runs before we resume
        return held

    held = asyncio.run(main())
    assert held == []
    assert stream.writes == ["task 0 succeeded\ntask 1 succeeded\ntask 2 succeeded\n"]


def test_a_record_from_another_thread_writes_what_waits_first() -> None:
    """A record logged off the loop (a thread) is written after the loop's waiting records, not before."""
    log, _, stream = _logger("thread")

    async def main() -> None:
        log.info("first, on the loop")
        worker = threading.Thread(target=log.info, args=("second, from a thread",))
        worker.start()
        worker.join()
        log.info("third, on the loop")
        await asyncio.sleep(0)

    asyncio.run(main())
    assert "".join(stream.writes).splitlines() == [
        "first, on the loop",
        "second, from a thread",
        "third, on the loop",
    ]
    assert stream.writes[0] == "first, on the loop\n"  # written by the thread's record, before its own


def test_flush_at_shutdown_writes_records_whose_turn_never_ended() -> None:
    """Records left when the loop stops before its flush runs are written by flush() (logging.shutdown)."""
    log, handler, stream = _logger("shutdown")
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(SystemExit):  # leaves the loop at once: the scheduled flush never runs
            loop.run_until_complete(_log_and_exit(log))
    finally:
        loop.close()
    assert stream.writes == []
    handler.flush()
    assert stream.writes == ["left behind\n"]
    log.info("after the loop")  # no loop runs now: written at once
    assert stream.writes[-1] == "after the loop\n"


async def _log_and_exit(log: logging.Logger) -> None:
    log.info("left behind")
    raise SystemExit(0)


def test_a_full_batch_is_written_without_waiting_for_the_turn() -> None:
    """A turn that logs more than MAX_BATCH records writes them in full batches, then the rest."""
    log, handler, stream = _logger("full")
    n = handler.MAX_BATCH * 2 + 5

    async def main() -> None:
        for i in range(n):
            log.info("r%d", i)
        assert len(stream.writes) == 2  # two full batches out during the turn
        await asyncio.sleep(0)

    asyncio.run(main())
    assert len(stream.writes) == 3
    assert "".join(stream.writes).splitlines() == [f"r{i}" for i in range(n)]


def test_cached_second_gives_the_same_text_as_logging() -> None:
    """The text and JSON time stamps equal what logging's own formatting gives, across a second boundary."""
    plain = logging.Formatter()
    text, js = TextFormatter(), JsonFormatter()
    for created in (1_700_000_000.999, 1_700_000_001.0, 1_700_000_001.5, 1_700_000_061.25):
        record = logging.LogRecord("conveyor.x", logging.INFO, __file__, 1, "m", (), None)
        record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
        record.child, record.task_id = "supervisor", ""
        assert text.formatTime(record) == plain.formatTime(record)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(record.msecs):03d}Z"
        assert f'"ts": "{stamp}"' in js.format(record)


@pytest.mark.parametrize("extra", ["plain", "exc_info", "exc_text", "stack_info"])
def test_text_format_is_loggings_own(extra: str) -> None:
    """The text line is logging.Formatter's for the same format string (a traceback or stack appended)."""
    fmt = "%(asctime)s %(levelname)-7s [%(child)s%(task_part)s] %(name)s: %(message)s"
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    for task_id in ("", "T1"):
        record = logging.LogRecord(
            "conveyor.x", logging.INFO, __file__, 1, "task %s done in %.3fs", ("a", 0.5), None
        )
        record.child, record.task_id = "supervisor", task_id
        if extra == "exc_info":
            record.exc_info = exc_info
        elif extra == "exc_text":
            record.exc_text = "Traceback (most recent call last):\n  child side"
        elif extra == "stack_info":
            record.stack_info = "Stack (most recent call last):\n  here"
        ours = TextFormatter().format(record)
        record.exc_text = None if extra == "exc_info" else record.exc_text  # logging formats it afresh
        assert ours == logging.Formatter(fmt).format(record)
        assert ours.startswith(f"{logging.Formatter().formatTime(record)} INFO    [supervisor")
