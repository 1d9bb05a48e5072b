"""How many CPUs this process may use: the default of ``conveyor worker --processes``.

``os.cpu_count()`` counts the machine's CPUs, so a container limited to 2 CPUs on a
64-core node would start 64 children. The usable count is the smallest of:

* the CPU affinity mask (``os.sched_getaffinity``: ``taskset``, cpusets);
* the cgroup v2 quota, ``cpu.max`` = ``"<quota> <period>"`` (``max`` = no limit), read
  from the process's own cgroup (``/proc/self/cgroup`` line ``0::<path>``);
* the cgroup v1 CFS quota, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (``-1`` = none);

a fractional quota rounds up (1.5 CPUs -> 2), and the result is at least 1. The files'
root is a parameter so tests read fake cgroup trees.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["available_cpus", "cgroup_cpu_limit"]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _quota(quota: float, period: float) -> float | None:
    return quota / period if quota > 0 and period > 0 else None


def _v2_limit(root: Path) -> float | None:
    own = _read(root / "proc/self/cgroup") or ""
    paths = [line[3:] for line in own.splitlines() if line.startswith("0::")]
    for rel in [*paths, "/"]:
        text = _read(root / "sys/fs/cgroup" / rel.lstrip("/") / "cpu.max")
        if text is None:
            continue
        fields = text.split()
        if len(fields) != 2 or fields[0] == "max":
            return None
        try:
            return _quota(float(fields[0]), float(fields[1]))
        except ValueError:
            return None
    return None


def _v1_limit(root: Path) -> float | None:
    for folder in ("sys/fs/cgroup/cpu,cpuacct", "sys/fs/cgroup/cpu"):
        quota = _read(root / folder / "cpu.cfs_quota_us")
        period = _read(root / folder / "cpu.cfs_period_us")
        if quota is None or period is None:
            continue
        try:
            return _quota(float(quota), float(period))
        except ValueError:
            return None
    return None


def cgroup_cpu_limit(root: Path = Path("/")) -> float | None:
    """CPUs the cgroup quota allows (v2 ``cpu.max``, else v1 CFS), or None without a quota."""
    return _v2_limit(root) or _v1_limit(root)


def _affinity() -> int | None:
    getter: Callable[[int], set[int]] | None = getattr(os, "sched_getaffinity", None)
    if getter is None:  # macOS: no affinity API
        return None
    try:
        return len(getter(0))
    except OSError:
        return None


def available_cpus(
    root: Path = Path("/"),
    affinity: Callable[[], int | None] = _affinity,
    cpu_count: Callable[[], int | None] = os.cpu_count,
) -> int:
    """CPUs usable by this process: min(affinity, cgroup quota rounded up), at least 1."""
    counts = [n for n in (affinity(), cpu_count()) if n]
    best = min(counts) if counts else 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        best = min(best, math.ceil(limit))
    return max(1, best)
