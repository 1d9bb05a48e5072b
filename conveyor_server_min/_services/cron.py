"""Cron entries: UpsertCron / ListCron / Pause / Resume / Delete, and materialization on each tick.

An entry is armed on the first tick after its upsert (``next_run_at`` computed from now); each
later tick enqueues a task for every due entry with ``unique_key = cron:<id>:<slot unix seconds>``
and ``unique_ttl = 1m``, then computes the next fire from now (missed slots collapse into one).
The entry's options are copied onto the task; server defaults (priority 4, max_retry) apply to
zero values, as for any Enqueue.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import ConveyorError, InvalidArgument, NotFound
from conveyor_server_min._engine.clock import NANOS
from conveyor_server_min._engine.cronspec import CronSchedule, parse_cron
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._services.bounds import MAX_NAME, check_size
from conveyor_server_min._services.convert import timestamp
from conveyor_server_min._services.validate import build_task
from conveyor_server_min.service_api import CallContext, UnaryMethod

__all__ = ["CronService", "Entry"]

log = logging.getLogger("conveyor.server.cron")
PREFIX = "/conveyor.v1.AdminService/"
_COPIED = ("max_retry", "timeout", "deadline", "retention", "priority", "group", "expires_at",
           "concurrency_key", "retry_policy")  # fmt: skip


@dataclass(slots=True)
class Entry:
    message: pb.CronEntry
    schedule: CronSchedule
    next_run: int | None = None  # epoch nanoseconds


def _request(msg: pb.CronEntry, slot: int) -> pb.EnqueueRequest:
    """The EnqueueRequest that materializes ``msg`` for the fire slot ``slot`` (unix seconds)."""
    req = pb.EnqueueRequest(
        queue=msg.queue, type=msg.task_type, payload=msg.payload, content_type=msg.content_type,
        unique_key=f"cron:{msg.id}:{slot}", unique_ttl={"seconds": 60},
    )  # fmt: skip
    opts = msg.options
    for name in _COPIED:
        if opts.DESCRIPTOR.fields_by_name[name].message_type is None:
            setattr(req, name, getattr(opts, name))
        elif opts.HasField(name):
            getattr(req, name).CopyFrom(getattr(opts, name))
    req.depends_on.extend(opts.depends_on)
    return req


class CronService:
    """The cron table and its AdminService RPCs."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.entries: dict[str, Entry] = {}

    def methods(self) -> list[UnaryMethod]:
        def m(name: str, fn: Any) -> UnaryMethod:
            return UnaryMethod(
                PREFIX + name, getattr(pb, name + "Request"), getattr(pb, name + "Response"), fn
            )

        return [
            m("ListCron", self.list_cron),
            m("UpsertCron", self.upsert),
            m("PauseCron", self.pause),
            m("ResumeCron", self.resume),
            m("DeleteCron", self.delete),
        ]

    async def list_cron(self, req: pb.ListCronRequest, ctx: CallContext) -> pb.ListCronResponse:
        out = pb.ListCronResponse()
        for cron_id in sorted(self.entries):
            entry = self.entries[cron_id]
            msg = out.entries.add()
            msg.CopyFrom(entry.message)
            if entry.next_run is not None:
                msg.next_run_at.CopyFrom(timestamp(entry.next_run))
        return out

    async def upsert(self, req: pb.UpsertCronRequest, ctx: CallContext) -> pb.UpsertCronResponse:
        entry = pb.CronEntry()
        entry.CopyFrom(req.entry)
        entry.ClearField("next_run_at")
        if not entry.id:
            raise InvalidArgument("cron entry id is required")
        if not entry.task_type:
            raise InvalidArgument("cron entry task_type is required")
        check_size("cron entry id", entry.id, MAX_NAME)
        check_size("cron spec", entry.spec, MAX_NAME)
        try:
            schedule = parse_cron(entry.spec)
        except ValueError as exc:
            raise InvalidArgument(f"invalid cron spec {entry.spec!r}: {exc}") from None
        entry.queue = entry.queue or "default"
        # the options a fired task would carry must pass Enqueue validation now, not fail every tick
        engine = self.engine
        build_task(_request(entry, 0), now=engine.now(), new_id=lambda _now: "", default_max_retry=0)
        self.entries[entry.id] = Entry(entry, schedule)
        return pb.UpsertCronResponse()

    def _get(self, cron_id: str) -> Entry:
        if not cron_id:
            raise InvalidArgument("cron entry id is required")
        entry = self.entries.get(cron_id)
        if entry is None:
            raise NotFound(f"cron entry {cron_id!r} not found")
        return entry

    async def pause(self, req: pb.PauseCronRequest, ctx: CallContext) -> pb.PauseCronResponse:
        self._get(req.id).message.paused = True
        return pb.PauseCronResponse()

    async def resume(self, req: pb.ResumeCronRequest, ctx: CallContext) -> pb.ResumeCronResponse:
        entry = self._get(req.id)
        entry.message.paused = False
        entry.next_run = None  # re-armed from now on the next tick
        return pb.ResumeCronResponse()

    async def delete(self, req: pb.DeleteCronRequest, ctx: CallContext) -> pb.DeleteCronResponse:
        self.entries.pop(req.id, None)
        return pb.DeleteCronResponse()

    def tick(self) -> int:
        """Arm new entries and materialize due ones; returns the number of tasks enqueued."""
        now = self.engine.now()
        made = 0
        for entry in list(self.entries.values()):
            if entry.message.paused:
                continue
            if entry.next_run is None:
                entry.next_run = entry.schedule.next_after(now)
            elif entry.next_run <= now:
                made += self._fire(entry, entry.next_run // NANOS)
                entry.next_run = entry.schedule.next_after(now)
        return made

    def _fire(self, entry: Entry, slot: int) -> int:
        msg = entry.message
        req = _request(msg, slot)
        engine = self.engine
        try:
            max_retry = engine.config.default_max_retry
            engine.enqueue(
                build_task(req, now=engine.now(), new_id=engine.new_id, default_max_retry=max_retry)
            )
        except ConveyorError as exc:
            log.info("cron %s slot %d not enqueued: %s", msg.id, slot, exc)
            return 0
        return 1
