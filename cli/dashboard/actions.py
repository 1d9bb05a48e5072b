"""State-changing actions: POST only (the middleware enforces same-origin), then 303 back to a page.

A refused action (e.g. cancelling a completed task) re-renders the page it came from with the
server's reason in a banner and status 409/4xx; nothing is retried.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from conveyor_cli.dashboard.banner import problem
from conveyor_cli.dashboard.config import DashboardConfig
from conveyor_sdk.client import Client
from conveyor_sdk.errors import ConveyorError, InvalidArgument

__all__ = ["DESTRUCTIVE", "Dashboard", "confirm_first", "refused", "routes"]


class Dashboard(Protocol):
    """What the actions use of the dashboard (``app.Dashboard`` is one; a protocol, so this module
    does not import the module that imports it)."""

    @property
    def config(self) -> DashboardConfig: ...

    def html(self, template: str, status: int = 200, /, **ctx: Any) -> HTMLResponse: ...

    def cli(self) -> Client: ...


TASK_ACTIONS = ("run", "cancel", "archive", "delete", "reschedule")
DESTRUCTIVE = {"cancel", "archive", "delete"}  # asked again on a confirmation page before they run


def confirm_first(
    d: Dashboard, request: Request, form: Any, message: str, back: str, *, items: list[str] | None = None
) -> Response | None:
    """None when the form carries ``confirm=yes``; otherwise the confirmation page, which posts the
    same fields again (through the same CSRF check) with ``confirm=yes``. Server-side, so it holds
    without JavaScript and for every client."""
    if form.get("confirm") == "yes":
        return None
    fields = [(k, str(v)) for k, v in form.multi_items() if k != "confirm"]
    ctx = {"action": request.url.path, "fields": fields, "message": message, "items": items or []}
    return d.html("confirm.html", title="Confirm", banner=None, back=back, nav="", **ctx)


async def refused(d: Dashboard, exc: ConveyorError, back: str) -> Response:
    """The page of a refused action: the server's reason, status 404/400/409 (503 otherwise)."""
    banner = problem(exc, d.config.server)
    codes = {"not_found": 404, "invalid_argument": 400, "failed_precondition": 409}
    status = codes.get(banner["code"], 503)
    return d.html("refused.html", status, title="Action refused", banner=banner, back=back, nav="")


QUEUE_ACTIONS = ("pause", "resume")
CRON_ACTIONS = ("pause", "resume")


def _when(form: Any) -> dict[str, Any]:
    """Reschedule target from the form: ``in_seconds`` (number) or ``at`` (ISO 8601, UTC if naive)."""
    seconds, at = str(form.get("in_seconds", "")).strip(), str(form.get("at", "")).strip()
    if seconds:
        try:
            value = float(seconds)
        except ValueError:
            raise InvalidArgument(f"'in seconds' must be a number, got {seconds!r}") from None
        if value < 0:
            raise InvalidArgument("'in seconds' must not be negative")
        return {"process_in": timedelta(seconds=value)}
    if at:
        try:
            when = datetime.fromisoformat(at)
        except ValueError:
            raise InvalidArgument(f"'at' must be an ISO 8601 time, got {at!r}") from None
        return {"process_at": when if when.tzinfo else when.replace(tzinfo=UTC)}
    raise InvalidArgument("give 'in seconds' or 'at' to reschedule")


def routes(d: Dashboard) -> list[Route]:
    """The POST routes."""

    async def task_action(request: Request) -> Response:
        id, action = request.path_params["id"], request.path_params["action"]
        back = f"/tasks/{quote(id, safe='')}"
        form = await request.form()
        if action in DESTRUCTIVE:
            ask = confirm_first(d, request, form, f"{action.capitalize()} task {id}?", back)
            if ask is not None:
                return ask
        admin = d.cli().admin
        try:
            if action == "reschedule":
                await admin.reschedule_task(id, **_when(form))
            else:
                await getattr(admin, f"{action}_task")(id)
        except ConveyorError as exc:
            return await refused(d, exc, back)
        if action == "delete":
            queue = str(form.get("queue", ""))
            back = f"/queues/{quote(queue, safe='')}?deleted={quote(id, safe='')}" if queue else "/"
        return RedirectResponse(back, status_code=303)

    async def queue_action(request: Request) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        form = await request.form()
        back = "/queues/" + quote(name, safe="") if form.get("from") == "queue" else "/"
        try:
            await getattr(d.cli().admin, f"{action}_queue")(name)
        except ConveyorError as exc:
            return await refused(d, exc, back)
        return RedirectResponse(back, status_code=303)

    async def cron_action(request: Request) -> Response:
        id, action = request.path_params["id"], request.path_params["action"]
        try:
            await getattr(d.cli().admin, f"{action}_cron")(id)
        except ConveyorError as exc:
            return await refused(d, exc, "/cron")
        return RedirectResponse("/cron", status_code=303)

    task_re = "{action:str}"
    return [
        Route(f"/tasks/{{id}}/{task_re}", _only(task_action, TASK_ACTIONS), methods=["POST"]),
        Route("/queues/{name}/{action:str}", _only(queue_action, QUEUE_ACTIONS), methods=["POST"]),
        Route("/cron/{id}/{action:str}", _only(cron_action, CRON_ACTIONS), methods=["POST"]),
    ]


def _only(handler: Any, allowed: tuple[str, ...]) -> Any:
    async def guarded(request: Request) -> Response:
        if request.path_params["action"] not in allowed:
            return Response("unknown action", status_code=404)
        return await handler(request)

    return guarded
