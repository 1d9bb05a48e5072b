"""The durable broker: the in-memory indexes of :class:`MemoryBroker` over one SQLite file.

Reads never touch the disk: at start-up every row is loaded into the memory
broker's structures, and from then on each broker call that changes a task marks
it dirty and bumps :attr:`SqliteBroker.version`. :meth:`take_changes` snapshots the
dirty rows (on the event-loop thread, so the snapshot is consistent) and
:meth:`write` commits such a snapshot in one transaction (safe to run on another
thread: it touches only the connection and the snapshot). The services layer
decides when to commit and makes acknowledgements wait for it (group commit).

Settings that the engine keeps outside the broker (rate and concurrency limits,
group configs, cron entries) are opaque blobs here, written with the same
transaction as the task rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from conveyor_server_min._engine.broker import MemoryBroker
from conveyor_server_min._engine.model import State, Task
from conveyor_server_min._engine.store.codec import decode_task, encode_task
from conveyor_server_min._engine.store.schema import StoreError, open_database

__all__ = ["Changes", "SqliteBroker"]

_PAUSED = "paused_queues"


@dataclass(slots=True)
class Changes:
    """One transaction's worth of writes, detached from the live objects."""

    upserts: list[tuple[str, str, int, bytes]] = field(default_factory=list)
    payloads: list[tuple[str, bytes]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    settings: dict[str, bytes] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.upserts or self.deletes or self.settings)


class SqliteBroker(MemoryBroker):
    """A :class:`MemoryBroker` whose every change is persisted by :meth:`write`."""

    driver = "sqlite"

    def __init__(self, path: str, now: int, *, conn: sqlite3.Connection | None = None) -> None:
        super().__init__()
        self.path = path
        self._conn = conn if conn is not None else open_database(path)
        self._dirty: dict[str, Task] = {}
        self._deleted: set[str] = set()
        self._new: set[str] = set()
        self._settings: dict[str, bytes] = {}
        self.version = 0
        self.on_change: Callable[[], None] = lambda: None
        self.stored_settings: dict[str, bytes] = {}
        self._load(now)

    def __repr__(self) -> str:
        return f"SqliteBroker(path={self.path!r}, tasks={self.size()}, dirty={len(self._dirty)})"

    # --- start-up --------------------------------------------------------------------------------
    def _load(self, now: int) -> None:
        try:
            rows = self._conn.execute(
                "SELECT t.row, p.payload FROM tasks t LEFT JOIN payloads p ON p.id = t.id"
            ).fetchall()
            settings = self._conn.execute("SELECT key, value FROM settings").fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"database {self.path} cannot be read: {exc}") from None
        loaded: list[tuple[Task, Any]] = []
        for blob, payload in rows:
            try:
                loaded.append(decode_task(blob, payload or b""))
            except ValueError as exc:
                raise StoreError(f"database {self.path} is corrupt: {exc}") from None
        # Bucket members keep arrival order; everything else is order-independent.
        loaded.sort(key=lambda pair: (pair[1] is not None, pair[1] or 0, pair[0].id))
        for task, arrived in loaded:
            super().insert(task, arrived if task.state is State.AGGREGATING and arrived is not None else now)
        for task, _ in loaded:
            for prereq in task.waiting_on if task.state is State.BLOCKED else ():
                super().add_dependent(prereq, task.id)
        self.stored_settings = {key: bytes(value) for key, value in settings}
        try:
            paused = msgspec.msgpack.decode(self.stored_settings.get(_PAUSED, b"\x90"), type=list[str])
        except msgspec.DecodeError as exc:
            raise StoreError(f"database {self.path} is corrupt: paused queues: {exc}") from None
        for queue in paused:
            super().set_paused(queue, True)

    # --- change tracking -------------------------------------------------------------------------
    def _mark(self, task: Task) -> None:
        self._dirty[task.id] = task
        self._deleted.discard(task.id)
        self.version += 1
        self.on_change()

    def touch(self, task: Task) -> None:
        """Persist fields the engine changed without a state change."""
        if self.get(task.id) is task:
            self._mark(task)

    def insert(self, task: Task, now: int) -> None:
        super().insert(task, now)
        self._new.add(task.id)
        self._mark(task)

    def delete(self, task: Task) -> None:
        super().delete(task)
        self._dirty.pop(task.id, None)
        self._new.discard(task.id)
        self._deleted.add(task.id)
        self.version += 1
        self.on_change()

    def set_state(self, task: Task, state: State, now: int) -> None:
        super().set_state(task, state, now)
        self._mark(task)

    def set_paused(self, queue: str, paused: bool) -> None:
        super().set_paused(queue, paused)
        self.put_setting(_PAUSED, msgspec.msgpack.encode(sorted(self.paused_queues())))

    def put_setting(self, key: str, value: bytes) -> None:
        """Stage an opaque settings blob for the next commit."""
        self._settings[key] = value
        self.version += 1
        self.on_change()

    # --- committing ------------------------------------------------------------------------------
    def take_changes(self) -> Changes:
        """Snapshot and clear everything changed since the last call (event-loop thread)."""
        changes = Changes(deletes=sorted(self._deleted), settings=self._settings)
        for task in self._dirty.values():
            arrived = None
            if task.state is State.AGGREGATING:
                bucket = self.bucket(task.queue, task.group)
                arrived = bucket.members.get(task.id) if bucket is not None else None
            changes.upserts.append((task.id, task.queue, int(task.state), encode_task(task, arrived)))
            if task.id in self._new:
                changes.payloads.append((task.id, task.payload))
        self._new = set()
        self._dirty = {}
        self._deleted = set()
        self._settings = {}
        return changes

    def write(self, changes: Changes) -> None:
        """Commit one snapshot in one transaction; raises StoreError (nothing half-written)."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            if changes.upserts:
                conn.executemany(
                    "INSERT INTO tasks (id, queue, state, row) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (id) DO UPDATE SET state = excluded.state, row = excluded.row",
                    changes.upserts,
                )
            if changes.deletes:
                ids = [(i,) for i in changes.deletes]
                conn.executemany("DELETE FROM tasks WHERE id = ?", ids)
                conn.executemany("DELETE FROM payloads WHERE id = ?", ids)
            if changes.payloads:
                sql = "INSERT OR REPLACE INTO payloads (id, payload) VALUES (?, ?)"
                conn.executemany(sql, changes.payloads)
            if changes.settings:
                conn.executemany(
                    "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", changes.settings.items()
                )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"database {self.path}: write failed: {exc}") from None

    def settings_snapshot(self) -> Mapping[str, bytes]:
        return dict(self.stored_settings)

    def close(self) -> None:
        self._conn.close()
