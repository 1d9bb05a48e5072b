"""The server as a real process: command line, environment, auth, TLS URL, SIGTERM/SIGINT with sessions."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_server_min.testing import ServerProcess

from .h2client import H2Client
from .tls_util import make_cert

GET_TASK = "/conveyor.v1.TaskService/GetTask"
SESSION = "/conveyor.v1.WorkerService/Session"


def _run(
    args: list[str], env: dict[str, str] | None = None, module: str = "conveyor_server_min"
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--dev", "--lease-ttl", "soon"], {}, "--lease-ttl"),
        (["--dev", "--port", "http"], {}, "--port must be an integer"),
        (["--dev", "--port", "70000"], {}, "--port must be between"),
        (["--dev", "--group-max-size", "0"], {}, "--group-max-size"),
        (["--dev", "--tls-cert", "/nonexistent.pem"], {}, "--tls-cert and --tls-key"),
        (["--dev", "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], {}, "no such file"),
        ([], {}, "refusing to start without authentication"),
        (["--dev"], {"CONVEYOR_ENGINE__REAP_INTERVAL": "often"}, "CONVEYOR_ENGINE__REAP_INTERVAL"),
        (["--dev"], {"CONVEYOR_API__LISTEN": "nonsense"}, "CONVEYOR_API__LISTEN"),
    ],
)
def test_bad_settings_exit_2_with_one_line(args: list[str], env: dict[str, str], needle: str) -> None:
    """Each bad flag or environment value gives exit code 2 and one ``error:`` line, no traceback."""
    proc = _run(args, env)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_conveyor_server_command_shares_the_parser() -> None:
    """``conveyor server`` rejects the same bad values as ``python -m conveyor_server_min``."""
    proc = _run(["server", "--dev", "--lease-ttl", "xyz"], module="conveyor_cli")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --lease-ttl")
    helped = _run(["server", "--help"], module="conveyor_cli")
    assert helped.returncode == 0 and "--group-sweep-interval" in helped.stdout


def test_env_listen_and_tokens_apply_and_flags_win() -> None:
    """CONVEYOR_API__LISTEN / CONVEYOR_API__AUTH_TOKENS apply, flags win; the listening line is exact."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env.update({"CONVEYOR_API__LISTEN": "127.0.0.1:0", "CONVEYOR_API__AUTH_TOKENS": "t1, t2"})
    proc = ServerProcess(["--lease-ttl", "2s", "--token", "flagtok"], env=env)
    # ServerProcess adds --port 0 --host 127.0.0.1; flags win over the env listen address.
    proc.start()
    try:
        stdout_lines = [line for line in proc.output if line.startswith("listening on ")]
        assert stdout_lines == [f"listening on {proc.url}\n"]
        assert proc.url.startswith("http://127.0.0.1:")
        denied = httpx.post(proc.url + GET_TASK, json={"id": "x"})
        assert denied.status_code == 401 and denied.json()["code"] == "unauthenticated"
        # Flags win: the env tokens are replaced by --token.
        env_tok = httpx.post(proc.url + GET_TASK, json={"id": "x"}, headers={"authorization": "Bearer t1"})
        assert env_tok.status_code == 401
        allowed = httpx.post(
            proc.url + GET_TASK, json={"id": "x"}, headers={"authorization": "Bearer flagtok"}
        )
        assert allowed.status_code == 404 and allowed.json()["code"] == "not_found"
    finally:
        assert proc.stop() == 0
        if proc.proc is not None and proc.proc.stdout is not None:
            proc.proc.stdout.close()  # ServerProcess leaves its pipe open (ResourceWarning under -W error)


def test_env_only_configuration(tmp_path: Path) -> None:
    """With no flags but --dev, the env listen address and tokens are used (auth on even in dev)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env.update(
        {"CONVEYOR_API__LISTEN": "127.0.0.1:0", "CONVEYOR_API__AUTH_TOKENS": "t1,t2", "PYTHONUNBUFFERED": "1"}
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "conveyor_server_min", "--dev"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.split()[-1]
        assert (
            httpx.post(url + GET_TASK, json={"id": "x"}, headers={"authorization": "Bearer t2"}).status_code
            == 404
        )
        assert httpx.post(url + GET_TASK, json={"id": "x"}).status_code == 401
    finally:
        child.send_signal(signal.SIGINT)
        assert child.wait(15) == 0
        assert child.stdout is not None
        child.stdout.close()


def test_tls_flags_print_https_url(server_proc: Callable[..., ServerProcess], tmp_path: Path) -> None:
    """--tls-cert/--tls-key switch the listening line to https:// and serve HTTP/1.1 over TLS."""
    cert, key = make_cert(tmp_path)
    proc = server_proc(["--tls-cert", str(cert), "--tls-key", str(key)])
    assert proc.url.startswith("https://127.0.0.1:")
    import ssl

    with httpx.Client(verify=ssl.create_default_context(cafile=str(cert))) as client:
        assert client.get(proc.url + "/healthz").text == "ok"


async def _open_sessions(address: str, count: int) -> H2Client:
    host, port = address.rsplit(":", 1)
    client = await H2Client().connect(host, int(port))
    for i in range(count):
        sid = await client.open(SESSION)
        hello = pb.WorkerMessage(hello=pb.Hello(queues={f"q{i}": 1}, concurrency=2, sdk_version="test"))
        await client.send_msg(sid, hello)
        msgs = await client.server_messages(sid, 1)
        assert msgs and msgs[0].WhichOneof("frame") == "welcome"
    return client


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_with_live_sessions_exits_0_promptly(
    server_proc: Callable[..., ServerProcess], sig: int
) -> None:
    """With sessions open and a task leased, a signal ends them with OK, then GOAWAY; exit 0 in < 5 s."""
    proc = server_proc(["--lease-ttl", "30s"])
    enq = httpx.post(proc.url + "/conveyor.v1.TaskService/Enqueue", json={"queue": "q0", "type": "t"})
    assert enq.status_code == 200

    async def main() -> None:
        client = await _open_sessions(proc.address, 3)
        first = next(iter(client.streams))
        msgs = await client.server_messages(first, 2)
        assert msgs[1].WhichOneof("frame") == "dispatch"
        assert proc.proc is not None
        started = time.monotonic()
        proc.proc.send_signal(sig)
        for sid in list(client.streams):
            st = await client.wait(sid, timeout=10)
            assert (st.trailers or st.headers).get("grpc-status") == "0", st
        await asyncio.wait_for(client.closed.wait(), 10)
        assert client.goaway is not None and client.goaway.error_code == 0
        code = await asyncio.to_thread(proc.proc.wait, 10)
        assert code == 0 and time.monotonic() - started < 5
        await client.close()

    asyncio.run(main())


def test_sigterm_with_a_client_that_never_reads(server_proc: Callable[..., ServerProcess]) -> None:
    """A session stuck behind a zero window (big payloads, no WINDOW_UPDATE) does not delay exit past 5 s."""
    proc = server_proc(["--lease-ttl", "30s"])
    big = {"queue": "stuck", "type": "t", "payload": "A" * (1 << 20)}  # base64 text: 768 KiB decoded
    for _ in range(4):
        assert httpx.post(proc.url + "/conveyor.v1.TaskService/Enqueue", json=big).status_code == 200
    host, port = proc.address.rsplit(":", 1)

    async def main() -> None:
        client = await H2Client(auto_ack=False).connect(host, int(port))
        sid = await client.open(SESSION)
        hello = pb.WorkerMessage(hello=pb.Hello(queues={"stuck": 1}, concurrency=4, sdk_version="test"))
        await client.send_msg(sid, hello)
        await client.wait(sid, lambda s: len(s.data) >= 65535 - 1024, timeout=15)
        assert proc.proc is not None
        started = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.proc.wait, 10)
        assert code == 0 and time.monotonic() - started < 5
        await client.close()

    asyncio.run(main())


def test_port_in_use_is_one_line_error() -> None:
    """Binding a port that is taken prints one ``error:`` line and exits 1, no traceback."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = _run(["--dev", "--port", str(taken.getsockname()[1])])
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: cannot listen on 127.0.0.1:") and "Traceback" not in proc.stderr


def test_timeout_flags_reach_the_real_server(server_proc: Callable[..., ServerProcess]) -> None:
    """``--idle-timeout`` and ``--max-streams`` on the command line govern a real server process."""
    proc = server_proc(["--idle-timeout", "300ms", "--max-streams", "7"])
    host, port = proc.address.rsplit(":", 1)

    async def main() -> None:
        client = await H2Client().connect(host, int(port))
        await asyncio.wait_for(client.remote_settings.wait(), 10)
        assert client.conn.remote_settings.max_concurrent_streams == 7
        await client.wait_closed(10)
        assert client.goaway is not None and client.goaway.error_code == 0
        await client.close()

    asyncio.run(main())
