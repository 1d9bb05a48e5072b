"""Debian's Postgres for the cluster test: started when installed, with a database of our own."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests._util import wait_until

DB = "conveyor_interop"
DSN = f"postgres://{DB}:{DB}@127.0.0.1:5432/{DB}?sslmode=disable"


def _psql(sql: str) -> str:
    cmd = ["su", "postgres", "-c", f'psql -qtAc "{sql}"']
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout


def _ready() -> bool:
    cmd = ["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]
    return subprocess.run(cmd, check=False, timeout=10).returncode == 0


def unavailable() -> str | None:
    """Why Postgres cannot be used here, or None."""
    if not shutil.which("pg_ctlcluster") or not Path("/etc/postgresql").is_dir():
        return "Postgres is not installed (apt-get install -y postgresql)"
    if not shutil.which("su"):
        return "no `su` to run psql as the postgres user"
    return None


def fresh_database() -> str:
    """Start the newest cluster if it is down, (re)create our own database; returns its DSN."""
    if not _ready():
        version = sorted(Path("/etc/postgresql").iterdir(), key=lambda p: float(p.name))[-1].name
        subprocess.run(["pg_ctlcluster", version, "main", "start"], check=True, timeout=60)
        wait_until(_ready, timeout=30, interval=0.2, what="pg_isready")
    if "1" not in _psql(f"SELECT 1 FROM pg_roles WHERE rolname='{DB}'"):
        _psql(f"CREATE USER {DB} WITH PASSWORD '{DB}'")
    _psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    _psql(f"CREATE DATABASE {DB} OWNER {DB}")
    return DSN
