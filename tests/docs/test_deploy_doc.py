"""docs/deploy.md and examples/deploy/: every command line parses, and the worker and server lines run."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer

from conveyor_cli.app import app
from conveyor_server_min.testing import ServerProcess
from tests.runtime._worker_proc import WorkerProc

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "deploy.md").read_text()
DEPLOY = ROOT / "examples" / "deploy"
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def doc_blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(DOC) if kind == lang]


def sh_lines() -> list[list[str]]:
    return [shlex.split(line) for body in doc_blocks("sh") for line in body.splitlines() if line.strip()]


def exec_start(unit: str) -> list[str]:
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def flow_list(text: str, key: str) -> list[str]:
    """A YAML ``key: [..]`` flow list of strings (JSON-compatible, as the manifests write them)."""
    match = re.search(rf"^\s*{key}: (\[.*\])\s*$", text, re.M)
    assert match, f"no {key}: [...] line"
    return list(json.loads(match.group(1)))


def dockerfile_list(text: str, key: str) -> list[str]:
    match = re.search(rf"^{key} (\[.*\])\s*$", text, re.M)
    assert match, f"{key} is not in exec form (a JSON list)"
    return list(json.loads(match.group(1)))


def parse(argv: list[str]) -> None:
    """Parse ``conveyor ARGS`` with the real command tree; an unknown command or flag raises UsageError."""
    assert Path(argv[0]).name == "conveyor", argv
    group = typer.main.get_command(app)
    args = argv[1:]
    ctx = group.make_context("conveyor", list(args), resilient_parsing=False)
    name, cmd, rest = group.resolve_command(ctx, args)
    assert cmd is not None, name
    cmd.make_context(str(name), rest, parent=ctx)


def all_command_lines() -> list[list[str]]:
    worker_unit = (DEPLOY / "conveyor-worker.service").read_text()
    server_unit = (DEPLOY / "conveyor-server.service").read_text()
    docker = (DEPLOY / "Dockerfile").read_text()
    k8s = (DEPLOY / "k8s" / "worker.yaml").read_text()
    return [
        *sh_lines(),
        exec_start(worker_unit),
        exec_start(server_unit),
        dockerfile_list(docker, "ENTRYPOINT") + dockerfile_list(docker, "CMD"),
        flow_list(k8s, "command") + flow_list(k8s, "args"),
    ]


@pytest.mark.parametrize("argv", all_command_lines(), ids=lambda a: " ".join(a[1:4]))
def test_command_line_parses(argv: list[str]) -> None:
    """Each command line of the guide and its files is accepted by the real `conveyor` parser."""
    parse(argv)


def test_parser_refuses_a_made_up_flag() -> None:
    """The parse check can fail: a flag `conveyor worker` does not have is a UsageError."""
    with pytest.raises(Exception, match="no-such-flag"):
        parse(["conveyor", "worker", "myapp.tasks:app", "--no-such-flag"])


def test_doc_snippets_match_the_files() -> None:
    """The unit, Dockerfile and manifest lines quoted in the guide are the ones in examples/deploy/."""
    unit = (DEPLOY / "conveyor-worker.service").read_text()
    ini = doc_blocks("ini")[0]
    assert all(line in unit for line in ini.strip().splitlines())
    docker = (DEPLOY / "Dockerfile").read_text()
    assert all(line in docker for line in doc_blocks("dockerfile")[0].strip().splitlines())
    k8s = (DEPLOY / "k8s" / "worker.yaml").read_text()
    blocks = doc_blocks("yaml")
    assert len(blocks) >= 2  # the container lines and the utilization trigger
    for block in blocks:
        for line in block.strip().splitlines():
            assert line.strip() in k8s, line


def _triggers(text: str) -> list[str]:
    """The ``triggers:`` list of a ScaledObject, comments and indentation dropped."""
    body = text.split("kind: ScaledObject", 1)[1].split("  triggers:\n", 1)[1].split("\n---", 1)[0]
    lines = (line.split("#", 1)[0].strip() for line in body.split("```", 1)[0].splitlines())
    return [line for line in lines if line]


def test_manifest_scales_on_backlog_and_utilization_as_runtime_md_says() -> None:
    """The manifest's KEDA triggers are docs/runtime.md's ScaledObject: the backlog and the utilization."""
    k8s = (DEPLOY / "k8s" / "worker.yaml").read_text()
    runtime = (ROOT / "docs" / "runtime.md").read_text()
    triggers = _triggers(k8s)
    assert triggers == _triggers(runtime)
    assert triggers.count("- type: prometheus") == 2
    queries = [t for t in triggers if t.startswith("query: ")]
    assert "conveyor_pending" in queries[0] and "conveyor_worker_slots" in queries[1]


def test_worker_manifest_probes_and_grace() -> None:
    """Probes hit /healthz and /readyz on the metrics port, and the pod grace exceeds --grace."""
    k8s = (DEPLOY / "k8s" / "worker.yaml").read_text()
    args = flow_list(k8s, "args")
    port = args[args.index("--metrics-port") + 1]
    assert f"httpGet: {{path: /healthz, port: {port}}}" in k8s
    assert f"httpGet: {{path: /readyz, port: {port}}}" in k8s
    grace = int(args[args.index("--grace") + 1].removesuffix("s"))
    pod = int(re.search(r"terminationGracePeriodSeconds: (\d+)", k8s).group(1))  # type: ignore[union-attr]
    assert pod > grace
    assert "kind: PodDisruptionBudget" in k8s and "conveyor_pending" in k8s


APP = textwrap.dedent(
    """
    from conveyor_sdk.app import App

    app = App()


    @app.task("deploy:ping", queue="default")
    def ping(payload: dict[str, int], ctx: object) -> str:
        return "pong"
    """
)


def runnable(argv: list[str]) -> list[str]:
    """The line with ports made free (0) and paths moved under the test's folder."""
    out = list(argv[1:])
    for flag in ("--port", "--metrics-port"):
        if flag in out:
            out[out.index(flag) + 1] = "0"
    if "--metrics-host" in out:
        out[out.index("--metrics-host") + 1] = "127.0.0.1"
    return out


def worker_lines() -> list[list[str]]:
    return [
        a for a in all_command_lines() if a[1] == "worker" and "--ca-file" not in a and "--server" not in a
    ]


def _run_worker_line(
    args: list[str],
    folder: Path,
    url: str,
    *,
    env: dict[str, str] | None = None,
    ca: str | None = None,
    token: str | None = None,
) -> None:
    """Run ``conveyor ARGS`` (without ``worker``) in ``folder`` until a task from ``url`` completed,
    then SIGTERM: it must exit 0."""
    from conveyor_sdk.client import SyncClient
    from tests._util import wait_until

    (folder / "myapp").mkdir()
    (folder / "myapp" / "__init__.py").write_text("")
    (folder / "myapp" / "tasks.py").write_text(APP)
    proc = WorkerProc(folder, args)  # WorkerProc adds `worker` itself
    proc.env.update(env or {})  # after: WorkerProc drops an inherited CONVEYOR_ADDR
    proc.start()
    try:
        with SyncClient(url, token=token, tls_ca_cert=Path(ca).read_bytes() if ca else None) as client:
            tid = client.enqueue("deploy:ping", {"n": 1}, retention=3600).id
            done = lambda: client.get_task(tid).state.name == "COMPLETED"  # noqa: E731
            try:
                wait_until(done, timeout=60, what="the task completed")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; worker output:\n{proc.output[-1500:]}") from None
    finally:
        proc.signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, proc.output[-2000:]


@pytest.mark.parametrize("argv", worker_lines(), ids=lambda a: " ".join(a[3:6]))
def test_worker_line_runs_and_drains_on_sigterm(argv: list[str], tmp_path: Path) -> None:
    """The worker line (unit, image, manifest) runs a task from CONVEYOR_ADDR's server, exits 0 on SIGTERM."""
    server = ServerProcess(["--dev"])
    server.start()
    try:  # CONVEYOR_ADDR: as the unit's EnvironmentFile / the pod's env gives it
        _run_worker_line(runnable(argv)[1:], tmp_path, server.url, env={"CONVEYOR_ADDR": server.url})
    finally:
        assert server.stop() == 0


def _doc_line(*needles: str) -> list[str]:
    return next(a for a in sh_lines() if all(n in a for n in needles))


def test_several_addresses_line_runs_with_the_first_node_down(tmp_path: Path) -> None:
    """The guide's `--server node1,node2,node3` line: node1 and node3 refuse, node2 serves."""
    argv = runnable(_doc_line("worker", "--server"))
    addresses = argv[argv.index("--server") + 1].split(",")
    assert len(addresses) == 3
    server = ServerProcess(["--dev"])
    server.start()
    try:
        dead = [_refused_url(), _refused_url()]
        argv[argv.index("--server") + 1] = ",".join([dead[0], server.url, dead[1]])
        _run_worker_line(argv[1:], tmp_path, server.url)
    finally:
        assert server.stop() == 0


def _refused_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_tls_server_and_ca_file_worker_lines_run(tmp_path: Path) -> None:
    """The guide's TLS lines: `conveyor server --tls-cert --tls-key --db` serves https, and the
    `--server https://... --ca-file` worker line runs a task from it (private CA)."""
    from tests.sdk_transport._helpers import make_certs

    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    argv = runnable(_doc_line("server", "--tls-cert"))
    argv[argv.index("--tls-cert") + 1] = str(certs.server_cert)
    argv[argv.index("--tls-key") + 1] = str(certs.server_key)
    argv[argv.index("--db") + 1] = str(tmp_path / "tasks.db")
    proc, bound = _start_server(argv, {"CONVEYOR_API__AUTH_TOKENS": "t1"}, scheme="https")
    url = "https://localhost:" + bound.rsplit(":", 1)[1]  # a name the certificate holds
    try:
        worker = runnable(_doc_line("worker", "--ca-file"))
        worker[worker.index("--server") + 1] = url
        worker[worker.index("--ca-file") + 1] = str(certs.ca)
        (tmp_path / "w").mkdir()
        env = {"CONVEYOR_TOKEN": "t1"}  # the token from the environment, as the guide says
        _run_worker_line(worker[1:], tmp_path / "w", url, env=env, ca=str(certs.ca), token="t1")
    finally:
        _stop(proc)
    assert (tmp_path / "tasks.db").exists()


def _start_server(
    argv: list[str], env: dict[str, str], scheme: str = "http"
) -> tuple[subprocess.Popen[str], str]:
    """``conveyor ARGS`` (a server line) as a process, and the API address it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "conveyor_cli", *argv], env={**__import__("os").environ, **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(rf"({scheme}://[\d.]+:\d+)", line)
        if match and "metrics" not in line:
            return proc, match.group(1)
    _stop(proc)
    raise AssertionError("the server printed no address")


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()
    assert code == 0


SERVER_LINES = {
    "unit": exec_start((DEPLOY / "conveyor-server.service").read_text()),
    "guide": next(a for a in sh_lines() if a[1] == "server" and "--tls-cert" not in a),
}


@pytest.mark.parametrize("which", sorted(SERVER_LINES))
def test_server_line_runs_with_db(which: str, tmp_path: Path) -> None:
    """The server unit's ExecStart and the guide's server line start (tokens from the environment,
    --db under tmp) and serve."""
    argv = runnable(SERVER_LINES[which])
    argv[argv.index("--db") + 1] = str(tmp_path / "tasks.db")
    proc, url = _start_server(argv, {"CONVEYOR_API__AUTH_TOKENS": "t1,t2"})
    try:
        from conveyor_sdk.client import SyncClient
        from conveyor_sdk.errors import Unauthenticated

        with SyncClient(url, token="t2") as client:
            client.enqueue("deploy:ping")
        with SyncClient(url) as anon, pytest.raises(Unauthenticated):
            anon.enqueue("deploy:ping")
    finally:
        _stop(proc)
    assert (tmp_path / "tasks.db").exists()
