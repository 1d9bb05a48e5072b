"""Server checks: bearer-token authentication (§2) on unary calls and on the Session stream."""

from __future__ import annotations

from conveyor_conformance._api import ApiClient
from conveyor_conformance.context import CheckContext
from conveyor_conformance.model import Requirement
from conveyor_conformance.registry import check

AUTH = [Requirement.AUTH_SERVER]


def _client(ctx: CheckContext, token: str | None) -> ApiClient:
    assert ctx.env.auth_url is not None
    client = ApiClient(ctx.env.auth_url, token, ca_file=ctx.env.config.ca_file)
    ctx.on_close(client.aclose)
    return client


@check(
    "server.2.unary-missing-token-unauthenticated",
    section="2",
    description="A unary call without Authorization fails with unauthenticated.",
    requires=AUTH,
)
async def unary_missing(ctx: CheckContext) -> str:
    err = await ctx.expect_error("unauthenticated", _client(ctx, None).get_task("x"), "GetTask without token")
    await ctx.expect_error(
        "unauthenticated", _client(ctx, None).enqueue(queue=ctx.queue, type="t"), "Enqueue without token"
    )
    return f"unauthenticated ({err.message})"


@check(
    "server.2.unary-wrong-token-unauthenticated",
    section="2",
    description="A unary call with a wrong bearer token fails with unauthenticated.",
    requires=AUTH,
)
async def unary_wrong(ctx: CheckContext) -> str:
    err = await ctx.expect_error("unauthenticated", _client(ctx, "wrong-token").get_task("x"), "wrong token")
    return f"unauthenticated ({err.message})"


@check(
    "server.2.session-missing-token-unauthenticated",
    section="2",
    description="A Session stream opened without Authorization fails with unauthenticated and no Welcome.",
    requires=AUTH,
)
async def session_missing(ctx: CheckContext) -> str:
    return await _session_rejected(ctx, None)


@check(
    "server.2.session-wrong-token-unauthenticated",
    section="2",
    description="A Session stream with a wrong bearer token fails with unauthenticated and no Welcome.",
    requires=AUTH,
)
async def session_wrong(ctx: CheckContext) -> str:
    return await _session_rejected(ctx, "wrong-token")


async def _session_rejected(ctx: CheckContext, token: str | None) -> str:
    from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb

    sess = await ctx.session(url=ctx.env.auth_url, token=token)
    try:
        await sess.send(pb.WorkerMessage(hello=pb.Hello(queues={ctx.queue: 1}, concurrency=1)))
    except Exception as exc:  # the server may reset before the Hello is written
        ctx.notes.append(f"send failed early: {type(exc).__name__}")
    err = await sess.expect_error(ctx.t(10))
    ctx.expect(err.code.connect_name == "unauthenticated", f"got {err.code.connect_name}: {err.message}")
    return f"unauthenticated ({err.message})"


@check(
    "server.2.valid-token-accepted",
    section="2",
    description="The configured bearer token is accepted on unary calls and on the Session stream.",
    requires=AUTH,
)
async def valid_token(ctx: CheckContext) -> str:
    token = ctx.env.auth_token
    client = _client(ctx, token)
    info = await client.enqueue(queue=ctx.queue, type="conformance:auth")
    sess = await ctx.session(url=ctx.env.auth_url, token=token)
    await sess.hello({ctx.queue: 1}, 1)
    msg = await sess.expect("dispatch", ctx.t(10))
    ctx.expect(msg.dispatch.task.id == info.id, "unexpected task")
    await sess.result(info.id, 1)
    return "Enqueue, Session and Dispatch with the token"
