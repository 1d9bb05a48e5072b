"""Server checks: the proto3 JSON mapping over Connect JSON (§1.1)."""

from __future__ import annotations

import base64
import re
from datetime import datetime
from typing import Any

from conveyor_conformance._api import ADMIN, TASK
from conveyor_conformance.context import CheckContext
from conveyor_conformance.registry import check

_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _enqueue_body(ctx: CheckContext, **extra: Any) -> dict[str, Any]:
    body = {
        "queue": ctx.queue,
        "type": "conformance:json",
        "payload": base64.b64encode(b'{"n":1}').decode(),
        "contentType": "application/json",
        "retention": "3600s",
    }
    body.update(extra)
    return body


@check(
    "server.1.1.json-enqueue-mapping",
    section="1.1",
    description=(
        "Connect JSON: Duration in as '1.500s', Timestamp out as RFC 3339, enum out as its name, "
        "bytes base64."
    ),
)
async def json_enqueue(ctx: CheckContext) -> str:
    out = await ctx.api.call_json(TASK + "Enqueue", _enqueue_body(ctx, processIn="1.500s"))
    task = out.get("task", {})
    ctx.expect(
        task.get("state") == "TASK_STATE_SCHEDULED", f"state {task.get('state')!r}, want the enum name"
    )
    for field in ("enqueuedAt", "processAt"):
        ctx.expect(_RFC3339.match(str(task.get(field, ""))), f"{field} {task.get(field)!r} is not RFC 3339")
    delay = _epoch(task["processAt"]) - _epoch(task["enqueuedAt"])  # both server clock
    ctx.expect(1.4 <= delay <= 1.6, f"processIn '1.500s' resolved to enqueuedAt + {delay:.3f}s")
    ctx.expect(
        isinstance(task.get("priority"), int), f"int32 priority {task.get('priority')!r} is not a number"
    )
    got = await ctx.api.call_json(TASK + "GetTask", {"id": task["id"]})
    payload = base64.b64decode(got["task"].get("payload", ""))
    ctx.expect(payload == b'{"n":1}', f"payload round trip gave {payload!r}")
    return f"state={task['state']} processAt={task['processAt']}"


@check(
    "server.1.1.json-enum-number-accepted",
    section="1.1",
    description="Connect JSON input accepts an enum as its number as well as its name.",
)
async def json_enum_number(ctx: CheckContext) -> str:
    first = await ctx.api.call_json(TASK + "Enqueue", _enqueue_body(ctx))
    pre = first["task"]["id"]
    by_number = _enqueue_body(ctx, dependsOn=[{"taskId": pre, "onFailure": 2}])
    by_name = _enqueue_body(
        ctx, dependsOn=[{"taskId": pre, "onFailure": "DEPENDENCY_FAILURE_POLICY_CONTINUE"}]
    )
    a = await ctx.api.call_json(TASK + "Enqueue", by_number)
    b = await ctx.api.call_json(TASK + "Enqueue", by_name)
    ctx.expect(a["task"]["state"] == b["task"]["state"] == "TASK_STATE_BLOCKED", "dependents not BLOCKED")
    return "onFailure 2 and 'DEPENDENCY_FAILURE_POLICY_CONTINUE' both accepted"


@check(
    "server.1.1.json-int64-as-string",
    section="1.1",
    description="Connect JSON encodes int64 fields as strings (ListQueues counts).",
)
async def json_int64(ctx: CheckContext) -> str:
    await ctx.api.call_json(TASK + "Enqueue", _enqueue_body(ctx, processIn="60s"))
    out = await ctx.api.call_json(ADMIN + "ListQueues", {})
    mine = [q for q in out.get("queues", []) if q.get("name") == ctx.queue]
    ctx.expect(mine, f"queue {ctx.queue} missing from ListQueues")
    value = mine[0].get("scheduled")
    ctx.expect(value == "1", f"int64 scheduled count is {value!r}, want the string '1'")
    return 'scheduled: "1"'


@check(
    "server.1.1.json-errors-use-connect-codes",
    section="4",
    description=(
        "A Connect JSON call that violates the contract gets an error body with code invalid_argument."
    ),
)
async def json_errors(ctx: CheckContext) -> str:
    err = await ctx.expect_error(
        "invalid_argument", ctx.api.call_json(TASK + "Enqueue", {"queue": ctx.queue}), "Enqueue without type"
    )
    status = err.details.get("http_status") if err.details else None
    ctx.expect(status == 400, f"HTTP status {status}, want 400")
    return f"HTTP 400 invalid_argument ({err.message})"


@check(
    "server.1.1.json-duration-output",
    section="1.1",
    description=(
        "Connect JSON encodes Duration output as decimal seconds with an s suffix ('1.500s', '3600s')."
    ),
)
async def json_duration_output(ctx: CheckContext) -> str:
    body = {"queue": ctx.queue, "group": "g", "maxSize": 5, "maxDelay": "1.500s", "gracePeriod": "3600s"}
    await ctx.api.call_json(ADMIN + "SetGroupConfig", body)
    try:
        out = await ctx.api.call_json(ADMIN + "ListGroupConfigs", {})
    finally:
        await ctx.api.call_json(ADMIN + "DeleteGroupConfig", {"queue": ctx.queue, "group": "g"})
    mine = [c for c in out.get("configs", []) if c.get("queue") == ctx.queue and c.get("group") == "g"]
    ctx.expect(mine, "the group config just set is missing from ListGroupConfigs")
    got = (mine[0].get("maxDelay"), mine[0].get("gracePeriod"))
    ctx.expect(got == ("1.500s", "3600s"), f"Durations encoded as {got}, want ('1.500s', '3600s')")
    return "maxDelay '1.500s', gracePeriod '3600s'"
