"""Handler registry, middleware hooks, context and the shared outcome mapping (invoke / invoke_async)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from typing import Any

import pytest

from conveyor_sdk._worker.outcomes import resolve_cancelled
from conveyor_sdk.worker import (
    CancelReason,
    CancelSignal,
    HandlerSpec,
    Job,
    Middleware,
    Outcome,
    OutcomeKind,
    Registry,
    SkipRetry,
    TaskContext,
    TaskData,
    invoke,
    invoke_async,
)
from tests.sdk_worker._helpers import callbacks_queued_so_far


def _summary(outcome: Outcome) -> Outcome:
    """The outcome with only its error's first line (the stack below it is checked on its own)."""
    return dataclasses.replace(outcome, error_msg=outcome.error_msg.partition("\n")[0])


def _task(tid: str = "t1", type_: str = "t", payload: bytes = b"{}", group: str = "") -> TaskData:
    return TaskData(
        id=tid, queue="q", type=type_, payload=payload, content_type="application/json",
        metadata={"k": "v"}, retried=0, max_retry=3, group=group,
    )  # fmt: skip


def _job(*tasks: TaskData, batch: bool = False) -> Job:
    jid = f"batch:{tasks[0].id}" if batch and len(tasks) > 1 else tasks[0].id
    return Job(job_id=jid, queue="q", type=tasks[0].type, tasks=tasks, batch=batch, deadline=None)


def test_duplicate_registration_names_type() -> None:
    """A second handler for one type raises ValueError naming the type."""
    reg = Registry()
    reg.handler("dup")(lambda t, c: None)
    with pytest.raises(ValueError, match="'dup'"):
        reg.handler("dup")(lambda t, c: None)


def test_registry_lookup_types_and_batch_types() -> None:
    """lookup/types/batch_types reflect registrations; async is detected."""
    reg = Registry()

    @reg.handler("a")
    async def a(task: Any, ctx: TaskContext) -> None: ...

    @reg.batch_handler("b")
    def b(tasks: Any, ctx: TaskContext) -> None: ...

    assert reg.types == ("a", "b")
    assert reg.batch_types == ("b",)
    spec = reg.lookup("a")
    assert spec is not None and spec.is_async and not spec.batch
    assert reg.lookup("zzz") is None


@pytest.mark.parametrize(
    ("ret", "expected"),
    [(None, b""), (b"raw", b"raw"), ("txt", b"txt"), (bytearray(b"ba"), b"ba")],
)
def test_return_values_map_to_success(ret: Any, expected: bytes) -> None:
    """Return values become SUCCESS with the documented result bytes."""
    reg = Registry()
    reg.handler("t")(lambda task, ctx: ret)
    assert invoke(reg, _job(_task())) == [Outcome(OutcomeKind.SUCCESS, result=expected)]


def test_exceptions_map_to_retry_and_skip_retry() -> None:
    """SkipRetry -> SKIP_RETRY; other exceptions (even BaseException) -> RETRY '<Type>: <msg>'."""
    reg = Registry()
    errors: dict[str, BaseException] = {
        "skip": SkipRetry("bad input"),
        "boom": ValueError("nope"),
        "exit": SystemExit(3),
        "kbd": KeyboardInterrupt(),
    }
    for name, exc in errors.items():

        def fn(task: Any, ctx: Any, exc: BaseException = exc) -> None:
            raise exc

        reg.register(HandlerSpec(type=name, fn=fn))
    full = {n: invoke(reg, _job(_task(type_=n)))[0] for n in errors}
    out = {n: _summary(o) for n, o in full.items()}
    assert full["boom"].error_msg.partition("\n")[2].startswith("Traceback (most recent call last):")
    assert out["skip"] == Outcome(OutcomeKind.SKIP_RETRY, error_msg="bad input")
    line = fn.__code__.co_firstlineno + 1  # the innermost frame: the handler's raise
    where = f"(at tests/sdk_worker/test_invoke.py:{line} in fn)"
    assert out["boom"] == Outcome(OutcomeKind.RETRY, error_msg=f"ValueError: nope {where}")
    assert out["exit"] == Outcome(OutcomeKind.RETRY, error_msg=f"SystemExit: 3 {where}")
    assert out["kbd"] == Outcome(OutcomeKind.RETRY, error_msg=f"KeyboardInterrupt {where}")
    assert out["boom"].traceback.startswith("Traceback (most recent call last):")
    assert f'test_invoke.py", line {line}, in fn' in out["boom"].traceback
    assert "conveyor_sdk" not in out["boom"].traceback  # the SDK's own frames are left out
    assert out["skip"].traceback == ""


def test_unknown_type_and_decode_failure() -> None:
    """Unknown types retry; a decode failure is SKIP_RETRY with the documented message."""
    reg = Registry()
    reg.handler("j", decode=lambda t: json.loads(t.payload))(lambda obj, ctx: obj["x"].encode())
    assert invoke(reg, _job(_task(type_="j", payload=b'{"x": "ok"}')))[0].result == b"ok"
    bad = invoke(reg, _job(_task(tid="T9", type_="j", payload=b"{nope")))[0]
    assert bad.kind is OutcomeKind.SKIP_RETRY
    assert bad.error_msg.startswith("cannot decode payload of task T9 (application/json): JSONDecodeError")
    unknown = invoke(reg, _job(_task(type_="missing")))[0]
    assert unknown.kind is OutcomeKind.RETRY and "missing" in unknown.error_msg


def test_async_handler_in_sync_invoke_and_async_invoke() -> None:
    """Async handlers run from both invoke forms; sync handlers run from invoke_async."""
    reg = Registry()

    @reg.handler("a")
    async def a(task: TaskData, ctx: TaskContext) -> bytes:
        await asyncio.sleep(0)
        return task.id.encode()

    @reg.handler("s")
    def s(task: TaskData, ctx: TaskContext) -> bytes:
        return threading.current_thread().name.encode()

    assert invoke(reg, _job(_task(type_="a")))[0].result == b"t1"
    res = asyncio.run(invoke_async(reg, _job(_task(type_="a"))))
    assert res[0].result == b"t1"
    res = asyncio.run(invoke_async(reg, _job(_task(type_="s"))))
    assert res[0].kind is OutcomeKind.SUCCESS and res[0].result != threading.current_thread().name.encode()


def test_batch_return_shapes() -> None:
    """Batch handlers: None = all SUCCESS, list per member, mapping by id, raise = all members."""
    reg = Registry()
    shape: dict[str, Any] = {}

    @reg.batch_handler("b")
    def b(tasks: list[TaskData], ctx: TaskContext) -> Any:
        assert ctx.is_batch and ctx.ids == tuple(t.id for t in tasks)
        if isinstance(shape["v"], Exception):
            raise shape["v"]
        return shape["v"]

    job = _job(_task("m1", "b", group="g"), _task("m2", "b", group="g"), batch=True)
    ok = Outcome(OutcomeKind.SUCCESS)
    shape["v"] = None
    assert invoke(reg, job) == [ok, ok]
    shape["v"] = [b"r1", SkipRetry("x")]
    expected = [Outcome(OutcomeKind.SUCCESS, result=b"r1"), Outcome(OutcomeKind.SKIP_RETRY, "x")]
    assert invoke(reg, job) == expected
    shape["v"] = {"m2": ValueError("v")}
    assert invoke(reg, job) == [ok, Outcome(OutcomeKind.RETRY, "ValueError: v")]
    shape["v"] = RuntimeError("all")
    line = b.__code__.co_firstlineno + 4  # (the first line is the decorator)
    raised = Outcome(OutcomeKind.RETRY, f"RuntimeError: all (at tests/sdk_worker/test_invoke.py:{line} in b)")
    assert [_summary(o) for o in invoke(reg, job)] == [raised] * 2
    shape["v"] = [None]
    assert all(o.kind is OutcomeKind.RETRY for o in invoke(reg, job))


def test_middleware_hooks_order_and_context() -> None:
    """before hooks run in order, after hooks in reverse, both see ctx; a hook error fails the task."""
    reg = Registry()
    calls: list[str] = []

    class Rec(Middleware):
        def __init__(self, name: str) -> None:
            self.name = name

        def before_task(self, ctx: TaskContext) -> None:
            calls.append(f"before-{self.name}-{ctx.id}")

        def after_task(self, ctx: TaskContext, result: Any, error: BaseException | None) -> None:
            calls.append(f"after-{self.name}-{result!r}-{type(error).__name__}")

    reg.middleware(Rec("a"))
    reg.add_middleware(Rec("b"))
    reg.handler("t")(lambda task, ctx: b"r")
    invoke(reg, _job(_task()))
    assert calls == ["before-a-t1", "before-b-t1", "after-b-b'r'-NoneType", "after-a-b'r'-NoneType"]

    class Broken(Middleware):
        def before_task(self, ctx: TaskContext) -> None:
            raise RuntimeError("mw")

    reg.middleware(Broken())
    line = Broken.before_task.__code__.co_firstlineno + 1
    assert _summary(invoke(reg, _job(_task()))[0]) == Outcome(
        OutcomeKind.RETRY, f"RuntimeError: mw (at tests/sdk_worker/test_invoke.py:{line} in before_task)"
    )


def test_async_handler_cancelled_by_signal() -> None:
    """Firing the signal cancels an async handler; outcome is cancelled and resolves by reason."""
    reg = Registry()
    started = threading.Event()

    @reg.handler("slow")
    async def slow(task: TaskData, ctx: TaskContext) -> None:
        started.set()
        await asyncio.sleep(60)

    async def main() -> list[Outcome]:
        sig = CancelSignal()
        fut = asyncio.ensure_future(invoke_async(reg, _job(_task(type_="slow")), signal=sig))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        sig.set(CancelReason.DRAIN)
        return await asyncio.wait_for(fut, 10)

    out = asyncio.run(main())
    assert out[0].cancelled
    assert resolve_cancelled(out[0], CancelReason.DRAIN).kind is OutcomeKind.RELEASED
    assert resolve_cancelled(out[0], CancelReason.DEADLINE) == Outcome(OutcomeKind.RETRY, "deadline exceeded")
    assert resolve_cancelled(out[0], CancelReason.SERVER_CANCEL).error_msg == "canceled by server"


def test_sync_handler_cooperative_cancel_and_progress() -> None:
    """A sync handler sees ctx.cancelled/wait_cancelled; raise_if_cancelled yields a cancelled outcome."""
    reg = Registry()
    progress: list[tuple[str, int, str]] = []

    @reg.handler("coop")
    def coop(task: TaskData, ctx: TaskContext) -> None:
        ctx.report_progress(150, "half")
        assert ctx.wait_cancelled(30)
        assert ctx.cancel_reason is CancelReason.SERVER_CANCEL
        ctx.raise_if_cancelled()

    sig = CancelSignal()
    result: list[list[Outcome]] = []
    th = threading.Thread(
        target=lambda: result.append(
            invoke(reg, _job(_task(type_="coop")), signal=sig, report_progress=lambda *a: progress.append(a))
        )
    )
    th.start()
    sig.set(CancelReason.SERVER_CANCEL)
    th.join(30)
    assert result and result[0][0].cancelled
    assert progress == [("t1", 100, "half")]


def test_handler_completing_despite_cancel_reports_real_outcome() -> None:
    """A handler that returns normally after a cancel request reports SUCCESS."""
    reg = Registry()
    reg.handler("t")(lambda task, ctx: b"done")
    sig = CancelSignal()
    sig.set(CancelReason.DEADLINE)
    out = invoke(reg, _job(_task()), signal=sig)
    assert out == [Outcome(OutcomeKind.SUCCESS, result=b"done")]
    assert resolve_cancelled(out[0], CancelReason.DEADLINE) == out[0]


def test_sync_callable_returning_a_coroutine_is_awaited() -> None:
    """A plain callable that returns a coroutine (e.g. a wrapper) still has its coroutine run."""
    reg = Registry()

    async def inner(task: TaskData) -> bytes:
        await asyncio.sleep(0)
        return b"inner"

    reg.register(HandlerSpec(type="t", fn=lambda task, ctx: inner(task)))
    assert invoke(reg, _job(_task())) == [Outcome(OutcomeKind.SUCCESS, result=b"inner")]


def test_cancel_signal_wakes_threads_that_wait_before_and_after_it_fires() -> None:
    """``wait`` from several threads: those already blocked wake on ``set``; later ones return at once."""
    sig = CancelSignal()
    assert sig.wait(0.01) is False  # not fired: the timeout passes
    blocked = threading.Barrier(4)
    woke: list[bool] = []

    def waiter() -> None:
        blocked.wait(10)
        woke.append(sig.wait(30))

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for th in threads:
        th.start()
    blocked.wait(10)
    sig.set(CancelReason.DRAIN)
    sig.set(CancelReason.DEADLINE)  # the first reason wins
    for th in threads:
        th.join(30)
    assert woke == [True, True, True]
    assert sig.is_set and sig.reason is CancelReason.DRAIN
    assert sig.wait(0) is True


def test_one_signal_shared_by_two_running_handlers_cancels_both() -> None:
    """The first handler arms the signal's slot, the second falls back to a callback: set() stops both."""
    reg = Registry()
    entered: list[str] = []
    both = asyncio.Event()

    @reg.handler("slow")
    async def slow(task: TaskData, ctx: TaskContext) -> None:
        entered.append(task.id)
        if len(entered) == 2:
            both.set()
        await asyncio.Event().wait()  # until cancelled

    async def main() -> list[list[Outcome]]:
        sig = CancelSignal()
        runs = [
            asyncio.ensure_future(invoke_async(reg, _job(_task(tid, "slow")), signal=sig)) for tid in "ab"
        ]
        await asyncio.wait_for(both.wait(), 10)
        sig.set(CancelReason.SERVER_CANCEL)
        return await asyncio.wait_for(asyncio.gather(*runs), 10)

    outs = asyncio.run(main())
    assert [out[0].cancelled for out in outs] == [True, True]


def test_a_cancel_scheduled_before_the_handler_returned_does_not_reach_the_code_after_it() -> None:
    """set() queues the task's cancel; a handler that returns before it runs keeps its result."""
    reg = Registry()
    sig = CancelSignal()

    @reg.handler("quick")
    async def quick(task: TaskData, ctx: TaskContext) -> bytes:
        sig.set(CancelReason.DEADLINE)  # the cancel is queued behind this step, which returns
        return b"done"

    async def main() -> tuple[list[Outcome], bool]:
        out = await invoke_async(reg, _job(_task(type_="quick")), signal=sig)
        await callbacks_queued_so_far()  # the queued cancel ran: it must have found nothing armed
        task = asyncio.current_task()
        assert task is not None
        return out, task.cancelling() > 0

    out, cancelled_after = asyncio.run(main())
    assert not cancelled_after
    assert out[0].kind is OutcomeKind.SUCCESS and not out[0].cancelled
