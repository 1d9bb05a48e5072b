"""The systems the peers bench compares, each at its defaults (flags only where it needs an address).

A system says which interpreter runs its worker and producer, which broker it needs, and the
worker's command line for a phase (``noop``: no-op and latency handlers; ``cpu``: the 5 ms
CPU-bound handler). ``missing`` says why it cannot run here (its venv or redis-server absent).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from _procs import redis_server

APPS = Path(__file__).resolve().parent / "apps"
# The apps and this checkout first: the bench measures the tree it is in, not an installed copy.
PYTHONPATH = os.pathsep.join([str(APPS), str(APPS.parents[2])])
OURS_PY = sys.executable
PEERS_PY = os.environ.get("PEERS_VENV", "/work/venv-peers") + "/bin/python"
CONVEYORQ_PY = os.environ.get("CONVEYORQ_VENV", "/work/venv-conveyorq") + "/bin/python"


@dataclass(frozen=True)
class System:
    name: str  # the row's label
    key: str  # produce.py's client: ours, conveyorq, celery, dramatiq, taskiq
    python: str
    broker: str  # "ours" (reference server), "redis", or "conveyord" (external)
    worker: tuple[str, ...]  # argv after the interpreter; {url} {queue} {phase} {app} are filled in
    peer: bool = False  # not ours: skipped (with the reason) when its venv is missing

    def command(self, url: str, queue: str, phase: str) -> list[str]:
        app = "ours_app:cpu_app" if phase == "cpu" else "ours_app:app"
        fill = {"url": url, "queue": queue, "phase": phase, "app": app}
        return [self.python, *(part.format(**fill) for part in self.worker)]

    def missing(self) -> str | None:
        if not Path(self.python).exists():
            return f"{self.python} not found (see bench/peers/README.md for the setup command)"
        if self.broker == "redis" and redis_server() is None:
            return "redis-server not installed (apt-get install redis-server)"
        return None


CLI = ("-m", "conveyor_cli", "worker", "{app}", "--server", "{url}", "-q", "{queue}=1")
OURS = [
    System("conveyor worker, defaults", "ours", OURS_PY, "ours", CLI),
    System(
        "in-process Worker, defaults",
        "ours",
        OURS_PY,
        "ours",
        ("ours_inproc.py", "{url}", "{queue}", "{phase}"),
    ),
    System(
        "conveyorq (concurrency 10)",
        "conveyorq",
        CONVEYORQ_PY,
        "ours",
        ("cq_worker.py", "{url}", "{queue}", "{phase}"),
        peer=True,
    ),
]
REDIS = [
    System("Dramatiq (Redis)", "dramatiq", PEERS_PY, "redis", ("-m", "dramatiq", "dramatiq_app"), peer=True),
    System(
        "Taskiq (Redis streams)",
        "taskiq",
        PEERS_PY,
        "redis",
        ("-m", "taskiq", "worker", "taskiq_app:broker"),
        peer=True,
    ),
    System(
        "Celery (prefork, Redis)",
        "celery",
        PEERS_PY,
        "redis",
        ("-m", "celery", "-A", "celery_app", "worker"),
        peer=True,
    ),
]
# Explicit flags, for before/after comparisons in the same run (--variants).
VARIANTS = [
    System(
        "conveyor worker --concurrency 4 (old default)", "ours", OURS_PY, "ours", (*CLI, "--concurrency", "4")
    ),
    System("conveyor worker --concurrency 64", "ours", OURS_PY, "ours", (*CLI, "--concurrency", "64")),
    System(
        "in-process Worker(concurrency=10) (old default)",
        "ours",
        OURS_PY,
        "ours",
        ("ours_inproc.py", "{url}", "{queue}", "{phase}", "10"),
    ),
]
CONVEYORD = [
    System("conveyor worker, defaults, on conveyord", "ours", OURS_PY, "conveyord", CLI),
    System(
        "in-process Worker, defaults, on conveyord",
        "ours",
        OURS_PY,
        "conveyord",
        ("ours_inproc.py", "{url}", "{queue}", "{phase}"),
    ),
    System(
        "conveyorq (concurrency 10) on conveyord",
        "conveyorq",
        CONVEYORQ_PY,
        "conveyord",
        ("cq_worker.py", "{url}", "{queue}", "{phase}"),
        peer=True,
    ),
]
# --variants with --conveyord: the old default on the production server, for the same-run before/after.
CONVEYORD_VARIANTS = [
    System(
        "conveyor worker --concurrency 4 (old default), on conveyord",
        "ours",
        OURS_PY,
        "conveyord",
        (*CLI, "--concurrency", "4"),
    ),
]
