"""The conformance suite's `server` family against conveyord gives exactly the expected upstream verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_conformance import CheckResult, Status
from conveyor_conformance.upstream import KNOWN_DIFFERENCES, verdict_problems
from tests.interop._conveyord import Conveyord

# the upstream conformance harness's settings (conformance/upstream.py)
HARNESS = (
    "  promote_interval: 300ms\n  group_max_size: 3\n"
    "  group_grace_period: 500ms\n  group_sweep_interval: 300ms\n"
)


def run_suite(url: str, profile: str, out: Path, *extra: str) -> list[CheckResult]:
    cmd = [sys.executable, "-m", "conveyor_cli", "conformance", "run", "--server", url, "--only", "server"]
    subprocess.run([*cmd, "--profile", profile, "--json", str(out), *extra], timeout=300, check=False)
    rows = json.loads(out.read_text())["results"]
    return [
        CheckResult(r["id"], r["section"], r["description"], r["family"], Status(r["status"]),
                    detail=r["detail"], divergence=r["divergence"])
        for r in rows
    ]  # fmt: skip


@pytest.mark.parametrize("profile", ["upstream", "strict"])
def test_server_family_verdict(node_factory: Callable[..., Conveyord], tmp_path: Path, profile: str) -> None:
    """Known §15 differences fail (strict) or diverge (upstream); every other check passes or is n/a."""
    node = node_factory(lease_ttl="2s", reap_interval="500ms", extra=HARNESS)
    results = run_suite(node.url, profile, tmp_path / "report.json")
    assert len(results) > 40
    assert verdict_problems(results, profile) == {}
    seen = {r.id for r in results if r.status in (Status.FAIL, Status.DIVERGENCE)}
    assert seen == set(KNOWN_DIFFERENCES)


def test_auth_checks_with_a_token(node_factory: Callable[..., Conveyord], tmp_path: Path) -> None:
    """With a token, the §2 authentication checks pass against conveyord."""
    node = node_factory(tokens=("interop-token",), extra=HARNESS)
    cmd_extra = ("--token", "interop-token")
    results = [
        r
        for r in run_suite(node.url, "upstream", tmp_path / "r.json", *cmd_extra)
        if r.id.startswith("server.2.")
    ]
    assert results and verdict_problems(results, "upstream", with_token=True) == {}
