"""Group commit for the durable store, and saving / restoring the settings kept outside the broker.

:class:`Committer` commits every change of one event-loop turn in one SQLite
transaction, on a dedicated thread so the loop keeps serving while the disk
syncs. Acknowledgements wait for it: a unary response is sent only once every
change made before it is committed (:meth:`Committer.sync`), and a session's
outbound frames (Dispatch, BatchDispatch, Cancel) go out only after the leases
they carry are committed. A failed commit makes the store unusable: later calls
fail with ``unavailable`` and the server stops (memory and disk would disagree).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
from google.protobuf.message import DecodeError as ProtoDecodeError

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import Unavailable
from conveyor_server_min._engine.cronspec import parse_cron
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.limits import GroupConfig, TokenBucket
from conveyor_server_min._engine.model import State
from conveyor_server_min._engine.store import SqliteBroker, StoreError
from conveyor_server_min._engine.store.codec import dec_time, enc_time
from conveyor_server_min._services.cron import CronService, Entry

__all__ = ["Committer", "SettingsKeeper"]

log = logging.getLogger("conveyor.server.store")
_LIMITS, _CRON = "limits", "cron"


class Committer:
    """Commits the broker's changes, one transaction per loop turn, and lets callers wait for it."""

    def __init__(self, broker: SqliteBroker, on_fatal: Callable[[], None] = lambda: None) -> None:
        self.broker = broker
        self.committed = broker.version
        self.commits = 0
        self.failure: str | None = None
        self._on_fatal = on_fatal
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._runner: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="conveyor-store")
        broker.on_change = self._kick

    def __repr__(self) -> str:
        return f"Committer(committed={self.committed}, commits={self.commits}, failure={self.failure!r})"

    def _kick(self) -> None:
        if self._runner is None and self.failure is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # engine used outside a loop: the next change or sync() commits
                return
            self._runner = loop.create_task(self._run(), name="conveyor-store-commit")

    async def sync(self) -> None:
        """Return once every change made so far is committed; Unavailable if the store failed."""
        target = self.broker.version
        if self.failure is not None:
            raise Unavailable(self.failure)
        if target <= self.committed:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        self._kick()
        await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.broker.version > self.committed:
                await asyncio.sleep(0)  # let the rest of this loop turn add its changes
                version = self.broker.version
                changes = self.broker.take_changes()
                if changes:
                    await loop.run_in_executor(self._pool, self.broker.write, changes)
                    self.commits += 1
                self.committed = version
                self._release(version)
        except Exception as exc:  # isolation point: a failed commit stops the store, not the loop
            self.failure = f"durable store failed: {exc}"
            log.error("%s; stopping the server", self.failure)
            for _, future in self._waiters:
                if not future.done():
                    future.set_exception(Unavailable(self.failure))
            self._waiters.clear()
            self._on_fatal()
        finally:
            self._runner = None

    def _release(self, version: int) -> None:
        keep = []
        for target, future in self._waiters:
            if target > version:
                keep.append((target, future))
            elif not future.done():
                future.set_result(None)
        self._waiters = keep

    async def close(self) -> None:
        """Commit what is left, then close the file."""
        if self.failure is None:
            with contextlib.suppress(Unavailable):
                await self.sync()
        runner = self._runner
        if runner is not None:
            await asyncio.gather(runner, return_exceptions=True)
        self._pool.shutdown(wait=True)
        self.broker.close()


class SettingsKeeper:
    """Rate/concurrency limits, group configs and cron entries <-> the store's settings blobs."""

    def __init__(self, engine: Engine, broker: SqliteBroker, cron: CronService) -> None:
        self.engine = engine
        self.broker = broker
        self.cron = cron
        self._saved: dict[str, bytes] = dict(broker.settings_snapshot())

    def restore(self) -> None:
        """Load saved settings into the engine and rebuild the lease bookkeeping of ACTIVE tasks."""
        try:
            self._restore_settings()
        except (msgspec.DecodeError, ProtoDecodeError, KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"database {self.broker.path} is corrupt: settings: {exc}") from None
        self._restore_leases()

    def _restore_settings(self) -> None:
        saved = self._saved
        if _LIMITS in saved:
            limits = msgspec.msgpack.decode(saved[_LIMITS])
            dispatcher = self.engine.dispatcher
            for queue, rate, burst in limits["rate"]:
                dispatcher.rate_limits[queue] = TokenBucket(rate, burst)
            dispatcher.key_limits.update({q: n for q, n in limits["concurrency"]})
            for queue, group, size, delay, grace in limits["groups"]:
                config = GroupConfig(size, dec_time(delay), dec_time(grace))
                self.engine.group_configs[(queue, group)] = config
        for raw, next_run in msgspec.msgpack.decode(saved[_CRON]) if _CRON in saved else ():
            message = pb.CronEntry.FromString(raw)
            self.cron.entries[message.id] = Entry(message, parse_cron(message.spec), dec_time(next_run))

    def _restore_leases(self) -> None:
        transitions, dispatcher = self.engine.transitions, self.engine.dispatcher
        top = 0
        for task in self.broker.active_tasks():
            if task.state is State.ACTIVE and task.concurrency_key:
                key = (task.queue, task.concurrency_key)
                transitions.key_active[key] = transitions.key_active.get(key, 0) + 1
            top = max(top, task.lease_id)
        dispatcher.restore_lease_seq(top)

    def save(self) -> None:
        """Stage whichever settings blob changed since the last save (after a mutating admin RPC)."""
        self._stage(_LIMITS, self._limits())
        self.save_cron()

    def save_cron(self) -> None:
        """Stage the cron table if a tick armed or fired an entry (it commits with the fired tasks)."""
        self._stage(_CRON, self._cron())

    def _stage(self, key: str, blob: bytes) -> None:
        if self._saved.get(key) != blob:
            self._saved[key] = blob
            self.broker.put_setting(key, blob)

    def _limits(self) -> bytes:
        dispatcher = self.engine.dispatcher
        groups = [
            [q, g, c.max_size, enc_time(c.max_delay), enc_time(c.grace_period)]
            for (q, g), c in sorted(self.engine.group_configs.items())
        ]
        return msgspec.msgpack.encode(
            {
                "rate": [[q, b.rate, b.burst] for q, b in sorted(dispatcher.rate_limits.items())],
                "concurrency": sorted(dispatcher.key_limits.items()),
                "groups": groups,
            }
        )

    def _cron(self) -> bytes:
        entries = self.cron.entries
        rows: list[Any] = [
            [entries[i].message.SerializeToString(deterministic=True), enc_time(entries[i].next_run)]
            for i in sorted(entries)
        ]
        return msgspec.msgpack.encode(rows)
