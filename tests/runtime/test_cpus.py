"""The --processes default counts the CPUs this process may use: affinity and the cgroup quota."""

from __future__ import annotations

from pathlib import Path

from conveyor_sdk._runtime.cpus import available_cpus, cgroup_cpu_limit


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _cpus(root: Path, affinity: int | None = 64, count: int | None = 64) -> int:
    return available_cpus(root, affinity=lambda: affinity, cpu_count=lambda: count)


def test_v2_quota_in_the_process_cgroup_limits_the_count(tmp_path: Path) -> None:
    """cpu.max "200000 100000" in the process's own cgroup on a 64-CPU machine gives 2."""
    _write(tmp_path, "proc/self/cgroup", "0::/kubepods/pod1\n")
    _write(tmp_path, "sys/fs/cgroup/kubepods/pod1/cpu.max", "200000 100000\n")
    _write(tmp_path, "sys/fs/cgroup/cpu.max", "max 100000\n")
    assert _cpus(tmp_path) == 2


def test_v2_max_means_no_limit(tmp_path: Path) -> None:
    """cpu.max "max 100000" leaves the affinity count."""
    _write(tmp_path, "proc/self/cgroup", "0::/\n")
    _write(tmp_path, "sys/fs/cgroup/cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    assert _cpus(tmp_path, affinity=6) == 6


def test_fractional_quota_rounds_up(tmp_path: Path) -> None:
    """A 1.5-CPU quota gives 2 children; a 0.2-CPU quota gives 1."""
    _write(tmp_path, "proc/self/cgroup", "0::/a\n")
    _write(tmp_path, "sys/fs/cgroup/a/cpu.max", "150000 100000\n")
    assert _cpus(tmp_path) == 2
    _write(tmp_path, "sys/fs/cgroup/a/cpu.max", "20000 100000\n")
    assert _cpus(tmp_path) == 1


def test_v1_cfs_quota(tmp_path: Path) -> None:
    """cgroup v1: cfs_quota_us 300000 / period 100000 gives 3; quota -1 means none."""
    _write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "300000\n")
    _write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    assert _cpus(tmp_path) == 3
    _write(tmp_path, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    assert _cpus(tmp_path, affinity=5) == 5


def test_affinity_below_the_cpu_count_wins(tmp_path: Path) -> None:
    """No cgroup files: taskset to 3 of 64 CPUs gives 3; no affinity API falls back to cpu_count."""
    assert _cpus(tmp_path, affinity=3) == 3
    assert _cpus(tmp_path, affinity=None, count=12) == 12
    assert _cpus(tmp_path, affinity=None, count=None) == 1


def test_garbage_cgroup_files_are_ignored(tmp_path: Path) -> None:
    """An unreadable or malformed cpu.max does not limit (and does not raise)."""
    _write(tmp_path, "proc/self/cgroup", "0::/\n")
    _write(tmp_path, "sys/fs/cgroup/cpu.max", "banana\n")
    assert _cpus(tmp_path, affinity=4) == 4
