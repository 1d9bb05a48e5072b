"""Server checks: flow control (§5.5), batches (§5.11), progress (§5.8), Cancel (§5.7)."""

from __future__ import annotations

from conveyor_conformance._session import RawSession
from conveyor_conformance.checks._common import (
    ARCHIVED,
    CANCELED,
    COMPLETED,
    SUCCESS,
    expect_free_redelivery,
    state_is,
)
from conveyor_conformance.context import CheckContext
from conveyor_conformance.model import CheckFailed, Requirement
from conveyor_conformance.registry import check
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

DIV_PER_QUEUE = "§15.3: conveyord grants `concurrency` credits per served queue"


@check(
    "server.5.5.credits-never-exceeded",
    section="5.5",
    description="Total outstanding dispatches never exceed Hello.concurrency, across all declared queues.",
    divergence=DIV_PER_QUEUE,
)
async def credits_never_exceeded(ctx: CheckContext) -> str:
    other = ctx.queue + "-b"
    for q in (ctx.queue, other):
        for _ in range(3):
            await ctx.enqueue(queue=q)
    sess, _ = await ctx.worker_session(concurrency=2, queues={ctx.queue: 1, other: 1})
    got = [(await sess.expect("dispatch", ctx.t(10))).dispatch.task.id for _ in range(2)]
    try:
        await sess.quiet(ctx.t(1.5), holding=got)
    except CheckFailed as exc:
        raise CheckFailed(f"more than concurrency=2 outstanding over 2 queues: {exc}") from None
    await sess.result(got[0], SUCCESS)
    await sess.expect("dispatch", ctx.t(10))
    return "2 outstanding with concurrency 2 over 2 queues; a Result refilled exactly one slot"


@check(
    "server.5.5.result-refills-one-credit",
    section="5.5",
    description="With concurrency 1 the next Dispatch comes only after the Result for the previous one.",
)
async def result_refills(ctx: CheckContext) -> str:
    ids = [(await ctx.enqueue()).id for _ in range(2)]
    sess, _ = await ctx.worker_session(concurrency=1)
    first = (await sess.expect("dispatch", ctx.t(10))).dispatch.task.id
    await sess.quiet(ctx.t(1.0), holding=[first])
    await sess.result(first, SUCCESS)
    second = (await sess.expect("dispatch", ctx.t(10))).dispatch.task.id
    ctx.expect({first, second} == set(ids), f"dispatched {first}, {second}; enqueued {ids}")
    return "second Dispatch only after the first Result"


@check(
    "server.5.5.credit-validation",
    section="5.5",
    description="Credit n <= 0 or n > concurrency fails with invalid_argument; a valid Credit does not.",
)
async def credit_validation(ctx: CheckContext) -> str:
    sess, _ = await ctx.worker_session(concurrency=2)
    await sess.send(pb.WorkerMessage(credit=pb.Credit(n=1)))
    info = await ctx.enqueue()
    got = await sess.expect("dispatch", ctx.t(10))
    ctx.expect(got.dispatch.task.id == info.id, "unexpected task after a valid Credit")
    details = []
    # The bad Credits go to sessions on an empty queue: on this check's queue, the task above could
    # be redelivered to one of them (its lease lapses on a slow machine) before its Credit is read.
    empty = {ctx.queue + "-empty": 1}
    for n in (0, -1, 3):
        bad, _ = await ctx.worker_session(concurrency=2, queues=empty)
        await bad.send(pb.WorkerMessage(credit=pb.Credit(n=n)))
        err = await bad.expect_error(ctx.t(10))
        ctx.expect(err.code.connect_name == "invalid_argument", f"Credit n={n}: got {err.code.connect_name}")
        details.append(f"n={n}")
    return "valid Credit accepted; " + ", ".join(details) + " -> invalid_argument"


async def _fire_group(ctx: CheckContext, batch_type: str) -> tuple[list[str], pb.BatchDispatch, RawSession]:
    ids = [(await ctx.enqueue(type=batch_type, group="g")).id for _ in range(3)]
    sess, _ = await ctx.worker_session(concurrency=1, batch_types=[batch_type])
    msg = await sess.expect("batch_dispatch", ctx.t(20))
    return ids, msg.batch_dispatch, sess


@check(
    "server.5.11.batch-consumes-one-credit",
    section="5.11",
    description="A BatchDispatch takes one credit whatever its size; the BatchResult refunds it once.",
    requires=[Requirement.SHORT_LEASE],
)
async def batch_one_credit(ctx: CheckContext) -> str:
    ids, batch, sess = await _fire_group(ctx, "conformance:batch")
    members = [t.id for t in batch.tasks]
    ctx.expect(sorted(members) == sorted(ids), f"batch members {members} != enqueued {ids}")
    ctx.expect(batch.group == "g", f"BatchDispatch.group {batch.group!r} != 'g'")
    plain = await ctx.enqueue()
    await sess.quiet(ctx.t(1.0), holding=members)
    results = [pb.Result(task_id=i, outcome=SUCCESS) for i in members]
    await sess.send(pb.WorkerMessage(batch_result=pb.BatchResult(results=results)))
    nxt = await sess.expect("dispatch", ctx.t(10))
    ctx.expect(nxt.dispatch.task.id == plain.id, "the plain task was not dispatched after the BatchResult")
    for i in members:
        await ctx.wait_task(i, state_is(COMPLETED), "COMPLETED")
    return "3-member batch held the only slot; BatchResult freed it"


@check(
    "server.5.11.batch-omitted-member-released",
    section="5.11",
    description="A member omitted from BatchResult is released (redelivered, retried unchanged).",
    requires=[Requirement.SHORT_LEASE],
)
async def batch_omitted_released(ctx: CheckContext) -> str:
    _, batch, sess = await _fire_group(ctx, "conformance:batch")
    members = [t.id for t in batch.tasks]
    kept, omitted = members[:-1], members[-1]
    results = [pb.Result(task_id=i, outcome=SUCCESS) for i in kept]
    await sess.send(pb.WorkerMessage(batch_result=pb.BatchResult(results=results)))
    await expect_free_redelivery(ctx, sess, omitted, "omitted member")
    return "omitted member redelivered as a plain Dispatch with retried 0"


@check(
    "server.5.8.progress-visible",
    section="5.8",
    description="Progress{task_id, percent, message} is visible on GetTask while the task runs.",
)
async def progress_visible(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    sess, _ = await ctx.worker_session()
    await sess.expect("dispatch", ctx.t(10))
    await sess.send(pb.WorkerMessage(progress=pb.Progress(task_id=info.id, percent=42, message="half")))
    await sess.send(pb.WorkerMessage(progress=pb.Progress(task_id="unknown-task", percent=5)))
    got = await ctx.wait_task(
        info.id, lambda t: t.progress == 42 and t.progress_message == "half", "progress 42/'half'"
    )
    await sess.result(info.id, SUCCESS)
    await ctx.wait_task(info.id, state_is(COMPLETED), "COMPLETED")
    return f"progress={got.progress} message={got.progress_message!r}; unknown task_id dropped"


@check(
    "server.5.7.cancel-on-operator-cancel",
    section="5.7",
    description="Operator CancelTask on an ACTIVE task sends Cancel{task_id}; a later RETRY archives it.",
)
async def cancel_on_operator_cancel(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    sess, _ = await ctx.worker_session()
    await sess.expect("dispatch", ctx.t(10))
    await ctx.api.cancel_task(info.id)
    msg = await sess.expect("cancel", ctx.t(10))
    ctx.expect(msg.cancel.task_id == info.id, f"Cancel for {msg.cancel.task_id}, expected {info.id}")
    await sess.result(info.id, pb.TASK_OUTCOME_RETRY, "stopped")
    await ctx.wait_task(info.id, state_is(ARCHIVED), "ARCHIVED after cancel + RETRY")
    return "Cancel delivered; RETRY after cancel archived the task"


@check(
    "server.5.7.cancel-waiting-task",
    section="7",
    description="Operator CancelTask on a waiting task makes it CANCELED and it is never dispatched.",
)
async def cancel_waiting(ctx: CheckContext) -> str:
    info = await ctx.enqueue()
    await ctx.api.cancel_task(info.id)
    await ctx.wait_task(info.id, state_is(CANCELED), "CANCELED")
    sess, _ = await ctx.worker_session()
    await sess.quiet(ctx.t(1.0))
    return "canceled before dispatch"


@check(
    "server.5.2.weights-share-worker-capacity",
    section="5.2",
    description="Hello queue weights govern the share of one worker's dispatches across its queues (3:1).",
    divergence="§15.4: conveyord splits one queue's tasks across workers instead",
)
async def weights_share(ctx: CheckContext) -> str:
    heavy, light = ctx.queue + "-w3", ctx.queue + "-w1"
    for q in (heavy, light):
        for _ in range(8):
            await ctx.enqueue(queue=q)
    sess, _ = await ctx.worker_session(concurrency=1, queues={heavy: 3, light: 1})
    order = []
    for _ in range(8):
        msg = await sess.expect("dispatch", ctx.t(10))
        order.append(msg.dispatch.task.queue)
        await sess.result(msg.dispatch.task.id, SUCCESS)
    share = order.count(heavy)
    ctx.expect(5 <= share <= 7, f"{share} of 8 dispatches from the weight-3 queue, want about 6")
    return f"{share} of 8 dispatches from the weight-3 queue"
