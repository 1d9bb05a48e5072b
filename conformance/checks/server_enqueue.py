"""Server checks: TaskService Enqueue / EnqueueBatch / EnqueueTx / GetTask (§6)."""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Any

from conveyor_conformance._session import RawSession
from conveyor_conformance.checks._common import ARCHIVED, CANCELED, COMPLETED, PENDING, SUCCESS, ULID, dur, ts
from conveyor_conformance.context import CheckContext, describe
from conveyor_conformance.model import CheckFailed, Requirement
from conveyor_conformance.registry import check
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb

SCHEDULED = tpb.TASK_STATE_SCHEDULED
BLOCKED = tpb.TASK_STATE_BLOCKED
AGGREGATING = tpb.TASK_STATE_AGGREGATING
MIB = 1 << 20


@check(
    "server.6.1.enqueue-defaults",
    section="6.1",
    description=(
        "Enqueue applies defaults: queue 'default', max_retry 25, priority 4, server ULID id, PENDING."
    ),
)
async def enqueue_defaults(ctx: CheckContext) -> str:
    info = await ctx.api.enqueue(type="conformance:defaults", retention=dur(60))
    ctx.expect(info.queue == "default", f"queue {info.queue!r}, want 'default'")
    ctx.expect(info.max_retry == 25, f"max_retry {info.max_retry}, want 25")
    ctx.expect(info.priority == 4, f"priority {info.priority}, want 4")
    ctx.expect(ULID.match(info.id), f"server-assigned id {info.id!r} is not a ULID")
    ctx.expect(info.state == PENDING, f"initial state {describe(info)}, want PENDING")
    stored = await ctx.api.get_task(info.id)
    ctx.expect(
        stored.id == info.id and stored.type == "conformance:defaults", "GetTask disagrees with Enqueue"
    )
    with contextlib.suppress(Exception):  # best effort: keep the shared default queue clean
        await ctx.api.cancel_task(info.id)
    return f"id={info.id} queue=default max_retry=25 priority=4 PENDING"


_INVALID: list[tuple[str, dict[str, Any]]] = [
    ("empty type", {"type": ""}),
    ("bad queue name", {"queue": "-bad"}),
    ("process_at and process_in", {"process_at": ts(time.time() + 60), "process_in": dur(60)}),
    ("expires_at and expires_in", {"expires_at": ts(time.time() + 60), "expires_in": dur(60)}),
    ("group with process_in", {"group": "g", "process_in": dur(5)}),
    ("group with concurrency_key", {"group": "g", "concurrency_key": "k"}),
    ("negative max_retry", {"max_retry": -1}),
    ("priority 10", {"priority": 10}),
    ("priority -1", {"priority": -1}),
]


@check(
    "server.6.1.enqueue-validation",
    section="6.1",
    description=(
        "Enqueue rejects each contract violation with invalid_argument (type, queue, exclusive options)."
    ),
)
async def enqueue_validation(ctx: CheckContext) -> str:
    problems = []
    for what, fields in _INVALID:
        try:
            await ctx.expect_error("invalid_argument", ctx.enqueue(**fields), what)
        except CheckFailed as exc:
            problems.append(str(exc))
    ctx.expect(not problems, "; ".join(problems))
    return f"{len(_INVALID)} invalid requests rejected"


@check(
    "server.6.1.payload-limit",
    section="6.1",
    description="A payload of exactly 1 MiB is accepted; 1 MiB + 1 byte is invalid_argument.",
)
async def payload_limit(ctx: CheckContext) -> str:
    await ctx.enqueue(payload=b"x" * MIB, content_type="application/octet-stream")
    await ctx.expect_error("invalid_argument", ctx.enqueue(payload=b"x" * (MIB + 1)), "1 MiB + 1")
    return "1048576 bytes accepted, 1048577 rejected"


@check(
    "server.6.1.task-id-idempotent",
    section="6.1",
    description="Enqueue with a repeated client task_id returns already_exists.",
    divergence="§15.1: conveyord returns OK (silent no-op) for a repeated task_id",
)
async def task_id_idempotent(ctx: CheckContext) -> str:
    task_id = f"cf-{secrets.token_hex(8)}"
    first = await ctx.enqueue(task_id=task_id)
    ctx.expect(first.id == task_id, f"server replaced client id {task_id!r} with {first.id!r}")
    await ctx.expect_error("already_exists", ctx.enqueue(task_id=task_id), "repeat task_id")
    return "repeat id -> already_exists"


@check(
    "server.6.1.unique-key-conflicts",
    section="6.1",
    description=(
        "A unique_key held by an incomplete task makes another enqueue already_exists; it frees on cancel."
    ),
)
async def unique_key(ctx: CheckContext) -> str:
    key = f"cf-uniq-{secrets.token_hex(6)}"
    holder = await ctx.enqueue(unique_key=key)
    await ctx.expect_error("already_exists", ctx.enqueue(unique_key=key), "second enqueue with the key")
    sess, _ = await ctx.worker_session()
    await sess.expect("dispatch", ctx.t(10))
    await ctx.expect_error(
        "already_exists", ctx.enqueue(unique_key=key), "enqueue while the holder is ACTIVE"
    )
    await sess.result(holder.id, SUCCESS)
    await ctx.wait_task(holder.id, lambda t: t.state == COMPLETED, "COMPLETED")
    again = await ctx.enqueue(unique_key=key)
    return f"conflict while pending and active; re-enqueued as {again.id} after the holder completed"


@check(
    "server.6.1.priority-order",
    section="6.1",
    description="Within a queue, higher priority dispatches first (9 before default 4 before 1).",
)
async def priority_order(ctx: CheckContext) -> str:
    low = await ctx.enqueue(priority=1)
    mid = await ctx.enqueue()
    high = await ctx.enqueue(priority=9)
    sess, _ = await ctx.worker_session(concurrency=1)
    order = []
    for _ in range(3):
        msg = await sess.expect("dispatch", ctx.t(10))
        order.append(msg.dispatch.task.id)
        await sess.result(msg.dispatch.task.id, SUCCESS)
    names = {low.id: "p1", mid.id: "p4", high.id: "p9"}
    ctx.expect(order == [high.id, mid.id, low.id], f"dispatch order {[names.get(i, i) for i in order]}")
    return "p9, p4, p1"


@check(
    "server.6.1.delayed-task-waits",
    section="6.1",
    description=(
        "process_in makes the task SCHEDULED and it is not dispatched before it is due; past "
        "process_at is PENDING."
    ),
)
async def delayed(ctx: CheckContext) -> str:
    past = await ctx.enqueue(queue=ctx.queue + "-past", process_at=ts(time.time() - 5))
    ctx.expect(past.state == PENDING, f"past process_at: {describe(past)}")
    sent = time.monotonic()  # our own clock only: a remote server's clock may be skewed
    info = await ctx.enqueue(process_in=dur(1.5))
    ctx.expect(info.state == SCHEDULED, f"initial state {describe(info)}, want SCHEDULED")
    sess, _ = await ctx.worker_session()
    msg = await sess.expect("dispatch", ctx.t(15))
    waited = time.monotonic() - sent
    ctx.expect(msg.dispatch.task.id == info.id, "unexpected task")
    ctx.expect(waited >= 1.5 - 0.1, f"dispatched {waited:.2f}s after an enqueue with process_in 1.5s")
    return f"SCHEDULED, dispatched {waited:.2f}s after enqueue (process_in 1.5s)"


@check(
    "server.6.1.expired-task-is-archived",
    section="6.1",
    description="A task still waiting when expires_in passes is archived instead of run.",
    requires=[Requirement.SHORT_LEASE],
)
async def expiry(ctx: CheckContext) -> str:
    info = await ctx.enqueue(expires_in=dur(0.3), process_in=dur(1))
    got = await ctx.wait_task(info.id, lambda t: t.state == ARCHIVED, "ARCHIVED", within=15)
    sess, _ = await ctx.worker_session()
    await sess.quiet(ctx.t(0.5))
    return describe(got)


@check(
    "server.6.1.dependencies-block-until-success",
    section="6.1",
    description=(
        "depends_on keeps a task BLOCKED until its prerequisite succeeds; CASCADE_CANCEL cancels on failure."
    ),
)
async def dependencies(ctx: CheckContext) -> str:
    first = await ctx.enqueue(type="conformance:first")
    cascade = tpb.DEPENDENCY_FAILURE_POLICY_CASCADE_CANCEL
    after = await ctx.enqueue(depends_on=[tpb.TaskDependency(task_id=first.id)])
    doomed_pre = await ctx.enqueue(type="conformance:doomed")
    doomed = await ctx.enqueue(depends_on=[tpb.TaskDependency(task_id=doomed_pre.id, on_failure=cascade)])
    ctx.expect(after.state == BLOCKED, f"dependent initial state {describe(after)}, want BLOCKED")
    sess, _ = await ctx.worker_session(concurrency=1)
    order = await _run_dependency_tasks(ctx, sess, first.id, after.id, doomed_pre.id)
    await ctx.wait_task(after.id, lambda t: t.state == COMPLETED, "COMPLETED")
    gone = await ctx.wait_task(doomed.id, lambda t: t.state == CANCELED, "CANCELED by cascade", within=20)
    return f"order {' -> '.join(order)}; dependent ran after its prerequisite; cascade: {describe(gone)}"


async def _run_dependency_tasks(
    ctx: CheckContext, sess: RawSession, first: str, after: str, doomed_pre: str
) -> list[str]:
    """Answer dispatches (concurrency 1) until all three runnable tasks ran; returns their order.

    Any order the protocol allows passes: ``after`` is legal once ``first`` succeeded (the
    only blocked moment is before that Result), ``doomed_pre`` at any time. The cascade
    dependent must never be dispatched, and neither must ``after`` before its prerequisite.
    """
    names = {first: "first", after: "dependent", doomed_pre: "doomed prerequisite"}
    done: list[str] = []
    while len(done) < len(names):
        msg = await sess.expect("dispatch", ctx.t(20))
        task = msg.dispatch.task
        ctx.expect(task.id in names, f"dispatched {task.type} {task.id} while it was blocked")
        ctx.expect(
            task.id != after or first in done, "dependent dispatched before its prerequisite's SUCCESS"
        )
        ctx.expect(task.id not in done, f"{names[task.id]} dispatched twice")
        outcome = pb.TASK_OUTCOME_SKIP_RETRY if task.id == doomed_pre else SUCCESS
        await sess.result(task.id, outcome, "fail prerequisite" if outcome != SUCCESS else "")
        done.append(task.id)
    return [names[i] for i in done]


@check(
    "server.6.1.enqueue-batch-per-item-errors",
    section="6.1",
    description=(
        "EnqueueBatch reports per-item errors positionally; empty or >1000 items is invalid_argument."
    ),
)
async def enqueue_batch(ctx: CheckContext) -> str:
    items = [ctx.request(), ctx.request(type=""), ctx.request()]
    resp = await ctx.api.enqueue_batch(items)
    ctx.expect(len(resp.results) == 3, f"{len(resp.results)} results for 3 items")
    ok = [bool(r.task.id) and not r.error for r in resp.results]
    ctx.expect(ok == [True, False, True], f"per-item success {ok}, want [True, False, True]")
    ctx.expect(resp.results[1].error, "failed item has an empty error string")
    await ctx.expect_error("invalid_argument", ctx.api.enqueue_batch([]), "empty batch")
    big = [ctx.request() for _ in range(1001)]
    await ctx.expect_error("invalid_argument", ctx.api.enqueue_batch(big), "1001 items")
    return f"item 1 error: {resp.results[1].error!r}; empty and 1001 rejected"


@check(
    "server.6.1.enqueue-tx-atomic",
    section="6.1",
    description="EnqueueTx commits all or nothing: an invalid item or a unique_key clash commits no item.",
)
async def enqueue_tx(ctx: CheckContext) -> str:
    ids = [f"cf-tx-{secrets.token_hex(6)}" for _ in range(4)]
    bad = [ctx.request(task_id=ids[0]), ctx.request(task_id=ids[1], type="")]
    await ctx.expect_error("invalid_argument", ctx.api.enqueue_tx(bad), "tx with an invalid item")
    await ctx.expect_error("not_found", ctx.api.get_task(ids[0]), "item 0 after the failed tx")
    key = f"cf-txkey-{secrets.token_hex(4)}"
    clash = [ctx.request(task_id=ids[2], unique_key=key), ctx.request(task_id=ids[3], unique_key=key)]
    await ctx.expect_error("already_exists", ctx.api.enqueue_tx(clash), "tx with a unique_key clash")
    await ctx.expect_error("not_found", ctx.api.get_task(ids[2]), "item 0 after the clashing tx")
    good = await ctx.api.enqueue_tx([ctx.request(task_id=ids[0]), ctx.request(task_id=ids[1])])
    ctx.expect([t.id for t in good.tasks] == ids[:2], "EnqueueTx tasks not in request order")
    return "invalid item and unique clash committed nothing; success returned tasks in order"


@check(
    "server.6.2.get-task-errors",
    section="6.2",
    description="GetTask with an empty id is invalid_argument; an unknown id is not_found.",
)
async def get_task_errors(ctx: CheckContext) -> str:
    await ctx.expect_error("invalid_argument", ctx.api.get_task(""), "empty id")
    await ctx.expect_error("not_found", ctx.api.get_task("01ZZZZZZZZZZZZZZZZZZZZZZZZ"), "unknown id")
    return "empty -> invalid_argument, unknown -> not_found"


def _initial_state_problems(replies: list[tuple[str, pb.TaskInfo]], want: int) -> list[str]:
    """Replies whose state is not ``want`` or that carry a started_at (they were dispatched already)."""
    name = tpb.TaskState.Name(want).removeprefix("TASK_STATE_")
    return [
        f"{what} answered {describe(info)}{' with started_at' if info.HasField('started_at') else ''}"
        for what, info in replies
        if info.state != want or info.HasField("started_at")
    ] + ([] if replies else [f"no replies to check for {name}"])


@check(
    "server.6.1.reply-initial-state-with-worker",
    section="6.1",
    description=(
        "With an idle worker connected, Enqueue / EnqueueBatch / EnqueueTx still answer the initial "
        "state (PENDING, no started_at), though the worker receives the tasks at once."
    ),
)
async def reply_initial_state_with_worker(ctx: CheckContext) -> str:
    sess, _ = await ctx.worker_session(concurrency=8)
    one = await ctx.enqueue()
    batch = await ctx.api.enqueue_batch([ctx.request(), ctx.request()])
    tx = await ctx.api.enqueue_tx([ctx.request(), ctx.request()])
    replies = [("Enqueue", one)]
    replies += [(f"EnqueueBatch item {i}", r.task) for i, r in enumerate(batch.results)]
    replies += [(f"EnqueueTx item {i}", t) for i, t in enumerate(tx.tasks)]
    problems = _initial_state_problems(replies, PENDING)
    ctx.expect(not problems, "; ".join(problems))
    got = set()
    for _ in replies:
        msg = await sess.expect("dispatch", ctx.t(10))
        got.add(msg.dispatch.task.id)
        await sess.result(msg.dispatch.task.id, SUCCESS)
    ctx.expect(got == {info.id for _, info in replies}, "the worker did not receive the enqueued tasks")
    return f"{len(replies)} replies PENDING without started_at; all {len(got)} dispatched to the idle worker"


@check(
    "server.6.1.group-filling-reply-aggregating",
    section="6.1",
    description=(
        "With a batch-capable worker connected, the member whose Enqueue fills a group (size 3) "
        "answers AGGREGATING, though the group fires at once."
    ),
    requires=[Requirement.SHORT_LEASE],
)
async def group_filling_reply(ctx: CheckContext) -> str:
    batch_type = "conformance:batch"
    sess, _ = await ctx.worker_session(concurrency=1, batch_types=[batch_type])
    infos = [await ctx.enqueue(type=batch_type, group="g") for _ in range(3)]
    problems = _initial_state_problems([(f"member {i}", t) for i, t in enumerate(infos)], AGGREGATING)
    ctx.expect(not problems, "; ".join(problems))
    msg = await sess.expect("batch_dispatch", ctx.t(20))
    members = sorted(t.id for t in msg.batch_dispatch.tasks)
    ctx.expect(members == sorted(t.id for t in infos), f"batch members {members}")
    results = [pb.Result(task_id=i, outcome=SUCCESS) for i in members]
    await sess.send(pb.WorkerMessage(batch_result=pb.BatchResult(results=results)))
    return "3 members answered AGGREGATING; the group fired as one BatchDispatch"
