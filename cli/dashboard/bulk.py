"""Bulk task actions and the limits editor (POST only; the security middleware checks origin and auth).

Every destructive one (cancel, delete, archive, re-run all archived, removing a limit) goes through
``actions.confirm_first``. Results come back as a notice on the page the action came from.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from conveyor_cli.dashboard.actions import DESTRUCTIVE, Dashboard, confirm_first, refused
from conveyor_cli.limits_cmd import parse_rate
from conveyor_sdk.durations import parse_duration
from conveyor_sdk.errors import ConveyorError, InvalidArgument
from conveyor_sdk.types import TaskState

__all__ = ["routes"]

BULK_ACTIONS = ("run", "cancel", "delete", "archive")
BATCH = 1000  # ids per Batch* RPC (the server's maximum)


def _queue_url(name: str, **notice: Any) -> str:
    return f"/queues/{quote(name, safe='')}" + (f"?{urlencode(notice)}" if notice else "")


async def _apply(d: Dashboard, action: Any, ids: list[str]) -> tuple[int, int]:
    ok = failed = 0
    for start in range(0, len(ids), BATCH):
        results = await d.cli().admin.batch(action, ids[start : start + BATCH])
        failed += sum(1 for r in results if r.error)
        ok += sum(1 for r in results if not r.error)
    return ok, failed


def _int(form: Any, name: str, low: int) -> int:
    text = str(form.get(name, "")).strip()
    try:
        value = int(text)
    except ValueError:
        label = name.replace("_", " ")
        raise InvalidArgument(f"{label} must be a whole number >= {low}, got {text!r}") from None
    if value < low:
        raise InvalidArgument(f"{name.replace('_', ' ')} must be at least {low}, got {value}")
    return value


def _text(form: Any, name: str) -> str:
    value = str(form.get(name, "")).strip()
    if not value:
        raise InvalidArgument(f"{name.replace('_', ' ')} is required")
    return value


def _duration(form: Any, name: str) -> Any:
    try:
        return parse_duration(_text(form, name))
    except ValueError as exc:
        raise InvalidArgument(f"{name.replace('_', ' ')}: {exc}") from None


LABELS = {"rate": "rate limit", "concurrency": "concurrency limit", "group": "group setting"}


async def _set_limit(admin: Any, kind: str, form: Any) -> None:
    """Validate the form as the CLI does (one-line reasons) and set the limit."""
    queue = _text(form, "queue")
    if kind == "rate":
        try:
            rate = parse_rate(_text(form, "rate"))
        except ValueError as exc:
            raise InvalidArgument(str(exc).replace("--rate", "rate")) from None
        await admin.set_rate_limit(queue, rate, burst=_int(form, "burst", 1))
    elif kind == "concurrency":
        await admin.set_concurrency_limit(queue, _int(form, "max_active", 1))
    else:
        await admin.set_group_config(
            queue,
            str(form.get("group", "")).strip(),
            max_size=_int(form, "max_size", 1),
            max_delay=_duration(form, "max_delay"),
            grace_period=_duration(form, "grace_period"),
        )


async def _delete_limit(admin: Any, kind: str, queue: str, group: str) -> None:
    if kind == "rate":
        await admin.delete_rate_limit(queue)
    elif kind == "concurrency":
        await admin.delete_concurrency_limit(queue)
    else:
        await admin.delete_group_config(queue, group)


def routes(d: Dashboard) -> list[Route]:
    """The bulk and limits POST routes (listed before ``actions.routes``: same path shapes)."""
    return _bulk_routes(d) + _limit_routes(d)


def _bulk_routes(d: Dashboard) -> list[Route]:

    async def bulk(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        action, ids = str(form.get("action", "")), [str(i) for i in form.getlist("id")]
        back = _queue_url(name)
        if action not in BULK_ACTIONS:
            return await refused(d, InvalidArgument(f"unknown bulk action {action!r}"), back)
        if not ids:
            return await refused(d, InvalidArgument("select at least one task"), back)
        if action in DESTRUCTIVE:
            what = f"{len(ids)} task{'' if len(ids) == 1 else 's'}"
            ask = confirm_first(d, request, form, f"{action.capitalize()} {what}?", back, items=ids)
            if ask is not None:
                return ask
        try:
            ok, failed = await _apply(d, action, ids)
        except ConveyorError as exc:
            return await refused(d, exc, back)
        return RedirectResponse(_queue_url(name, bulk=action, ok=ok, failed=failed), status_code=303)

    async def rerun_archived(request: Request) -> Response:
        name = request.path_params["name"]
        form = await request.form()
        type_, back = str(form.get("type", "")).strip(), _queue_url(name)
        what = f"every archived task of type {type_!r}" if type_ else "every archived task"
        ask = confirm_first(d, request, form, f"Run {what} in queue {name} again?", back)
        if ask is not None:
            return ask
        try:
            ids = [
                t.id
                async for t in d.cli().admin.iter_tasks(queue=name, state=TaskState.ARCHIVED, page_size=1000)
                if not type_ or t.type == type_
            ]
            ok, failed = await _apply(d, "run", ids)
        except ConveyorError as exc:
            return await refused(d, exc, back)
        return RedirectResponse(_queue_url(name, bulk="rerun", ok=ok, failed=failed), status_code=303)

    return [
        Route("/queues/{name}/bulk", bulk, methods=["POST"]),
        Route("/queues/{name}/rerun-archived", rerun_archived, methods=["POST"]),
    ]


def _limit_routes(d: Dashboard) -> list[Route]:
    async def limit_set(request: Request) -> Response:
        kind, form = request.path_params["kind"], await request.form()
        try:
            await _set_limit(d.cli().admin, kind, form)
        except ConveyorError as exc:
            return await refused(d, exc, "/limits")
        return RedirectResponse(f"/limits?{urlencode({'saved': kind})}", status_code=303)

    async def limit_delete(request: Request) -> Response:
        kind, form = request.path_params["kind"], await request.form()
        queue, group = str(form.get("queue", "")), str(form.get("group", ""))
        target = f"{queue}/{group}" if kind == "group" and group else queue
        ask = confirm_first(d, request, form, f"Remove the {LABELS[kind]} of {target}?", "/limits")
        if ask is not None:
            return ask
        try:
            await _delete_limit(d.cli().admin, kind, queue, group)
        except ConveyorError as exc:
            return await refused(d, exc, "/limits")
        return RedirectResponse(f"/limits?{urlencode({'removed': kind})}", status_code=303)

    kinds = ("rate", "concurrency", "group")
    return [
        Route("/limits/{kind:str}", _kind(limit_set, kinds), methods=["POST"]),
        Route("/limits/{kind:str}/delete", _kind(limit_delete, kinds), methods=["POST"]),
    ]


def _kind(handler: Any, allowed: tuple[str, ...]) -> Any:
    async def guarded(request: Request) -> Response:
        if request.path_params["kind"] not in allowed:
            return Response("unknown limit kind", status_code=404)
        return await handler(request)

    return guarded
