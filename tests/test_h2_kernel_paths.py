"""Both paths of the HTTP/2 kernel, in every normal test run.

The rest of the suite runs on the fast path (the probe passes with the pinned versions). Here:

* the transport, server, client, worker and ScriptedPeer smoke tests run again in a fresh
  ``pytest`` process with ``CONVEYOR_H2_PUBLIC=1`` (the reference servers those tests start inherit
  it, so both ends take h2's public path); tests of the fast path itself (marker ``h2_fast``) are
  deselected there;
* a fresh process whose h2 lacks an internal the fast path needs takes the public path, says so
  once, and still serves a real call.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor_sdk._h2kernel import probe

ROOT = Path(__file__).resolve().parents[1]
SMOKE = [
    "tests/sdk_transport/test_peer_roundtrip.py",
    "tests/sdk_transport/test_control_frames.py",
    "tests/sdk_transport/test_core.py",
    "tests/server_http/test_hostile_h2.py",
    "tests/server_http/test_h2conn.py",
    "tests/sdk_client/test_h2_transport.py",
    "tests/sdk_worker/test_worker_peer.py",
    "tests/sdk_worker/test_latency_path.py",
    "tests/sdk_worker/test_worker_e2e.py::test_outcome_mapping_end_to_end",
    "tests/sdk_worker/test_worker_e2e.py::test_admin_cancel_reaches_running_handler",
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != probe.SWITCH and not k.startswith("PYTEST_")}
    return {**env, **extra}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_smoke_tests_pass_on_the_public_path() -> None:
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not h2_fast"]
    args += ["-o", "addopts=-ra --strict-markers --strict-config", *SMOKE]
    done = subprocess.run(  # noqa: PLW1510  # the return code is asserted with the output
        args, cwd=ROOT, env=_env(**{probe.SWITCH: "1"}), capture_output=True, text=True, timeout=580
    )
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " failed" not in done.stdout, tail


def test_the_switch_forces_the_public_path() -> None:
    code = "from conveyor_sdk._h2kernel import probe; print(probe.fast, probe.reason)"
    for value, expected in (("1", "False CONVEYOR_H2_PUBLIC is set"), ("", "True None")):
        done = subprocess.run(  # noqa: PLW1510  # the return code is asserted with the output
            [sys.executable, "-c", code], env=_env(**{probe.SWITCH: value}), capture_output=True, text=True
        )
        assert done.stdout.strip() == expected, done.stderr


# A fresh process whose h2 renamed one internal the fast path uses (h2's own callers follow the
# new name, as in a release), then one real call through the producer client against a reference
# server on the public path.
_MISSING = """
import asyncio, logging, sys
import h2.connection
H2 = h2.connection.H2Connection
H2._count_open = H2._open_streams
del H2._open_streams
H2.open_outbound_streams = property(lambda self: self._count_open(int(self.config.client_side)))
H2.open_inbound_streams = property(lambda self: self._count_open(int(not self.config.client_side)))
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from conveyor_sdk._h2kernel import probe
from conveyor_sdk.client import Client

async def main():
    async with Client(sys.argv[1]) as client:
        info = await client.enqueue("kernel:paths", {"i": 1})
        print("fast", probe.fast, "id", bool(info.id))

asyncio.run(main())
"""


def test_a_missing_internal_takes_the_public_path_logged_once(url: str) -> None:
    done = subprocess.run(  # noqa: PLW1510  # the return code is asserted with the output
        [sys.executable, "-c", _MISSING, url], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "fast False id True"
    warnings = [line for line in done.stderr.splitlines() if "HTTP/2 kernel:" in line]
    assert len(warnings) == 1, done.stderr
    assert "_open_streams is missing" in warnings[0] and "h2 4." in warnings[0]
