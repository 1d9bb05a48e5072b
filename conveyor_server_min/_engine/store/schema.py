"""Opening the SQLite file: pragmas, the exclusive lock, and versioned schema migrations.

The schema version lives in ``PRAGMA user_version``; ``MIGRATIONS[i]`` upgrades
version ``i`` to ``i + 1`` (version 0 is an empty file). An older file is upgraded
in place inside one transaction; a newer one is refused, as is a file that some
other program owns (its ``application_id`` differs). Every failure surfaces as one
:class:`StoreError` with a one-line message; nothing else escapes.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence

__all__ = ["APPLICATION_ID", "MIGRATIONS", "StoreError", "open_database", "schema_version"]

APPLICATION_ID = 0x436F6E76  # "Conv"

MIGRATIONS: tuple[str, ...] = (
    # v1: every task as one row (queue/state as columns for inspection, the rest in ``row``), its
    # payload written once in ``payloads``, and small settings blobs (pause flags, limits, cron).
    """
    CREATE TABLE tasks (
        id    TEXT PRIMARY KEY,
        queue TEXT NOT NULL,
        state INTEGER NOT NULL,
        row   BLOB NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE payloads (
        id      TEXT PRIMARY KEY,
        payload BLOB NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE settings (
        key   TEXT PRIMARY KEY,
        value BLOB NOT NULL
    ) WITHOUT ROWID;
    """,
)


class StoreError(Exception):
    """The durable store cannot be used; the message is one line meant for the operator."""


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def open_database(path: str, migrations: Sequence[str] = MIGRATIONS) -> sqlite3.Connection:
    """Open (creating if needed) and lock ``path``, migrated to ``len(migrations)``."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise StoreError(f"database {path}: directory {folder} does not exist")
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0.2)
    except sqlite3.Error as exc:
        raise StoreError(_explain(path, exc)) from None
    try:
        _configure(conn, path)
        _migrate(conn, path, migrations)
    except BaseException:
        conn.close()
        raise
    return conn


def _configure(conn: sqlite3.Connection, path: str) -> None:
    try:
        # EXCLUSIVE locking: the first write takes the file lock and keeps it until close, so a
        # second server on the same file fails at once instead of interleaving writes.
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise StoreError(_explain(path, exc)) from None
    if str(mode).lower() != "wal":
        raise StoreError(f"database {path}: cannot use write-ahead logging (journal mode {mode})")


def _explain(path: str, exc: sqlite3.Error) -> str:
    text = str(exc)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return f"database {path} is locked by another process (is another conveyor server using it?)"
    if any(word in low for word in ("readonly", "read-only", "unable to open", "permission", "disk i/o")):
        return f"database {path} is not writable (read-only file, folder or file system?): {text}"
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return f"database {path} is corrupt or not a SQLite database: {text}"
    return f"database {path}: {text}"


def _migrate(conn: sqlite3.Connection, path: str, migrations: Sequence[str]) -> None:
    try:
        version = schema_version(conn)
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        has_tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
    except sqlite3.Error as exc:
        raise StoreError(_explain(path, exc)) from None
    if (has_tables or version) and app_id != APPLICATION_ID:
        raise StoreError(f"database {path} was not created by conveyor (application id {app_id:#x})")
    target = len(migrations)
    if version > target:
        raise StoreError(
            f"database {path} has schema version {version}, newer than this server supports "
            f"({target}); upgrade conveyor or use another file"
        )
    if version == target:
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
        for step in migrations[version:]:
            for statement in _statements(step):
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={target}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StoreError(_explain(path, exc)) from None


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
