"""Prepare a run: start (or point at) servers, probe the Welcome, pick the worker program.

With no ``--server`` the suite starts ``conveyor_server_min`` itself with the
short timings the upstream harness uses, plus (only when selected checks need
it) a second instance that requires a bearer token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Sequence

from conveyor_conformance._api import ApiClient
from conveyor_conformance._session import open_raw_session
from conveyor_conformance.context import ServerFacts, SuiteConfig, SuiteEnv
from conveyor_conformance.model import Check, CheckResult, Requirement, Summary
from conveyor_conformance.registry import default_registry
from conveyor_conformance.runner import run_checks
from conveyor_sdk.errors import ConveyorError

__all__ = ["SHORT_TIMINGS", "default_worker_cmd", "prepared_env", "probe_facts", "run_suite", "stop_server"]

log = logging.getLogger("conveyor.conformance")

SHORT_TIMINGS = (
    "--lease-ttl", "2s",
    "--reap-interval", "500ms",
    "--promote-interval", "300ms",
    "--group-max-size", "3",
    "--group-grace-period", "500ms",
    "--group-sweep-interval", "300ms",
)  # fmt: skip


def default_worker_cmd() -> list[str]:
    """``conveyor conformance worker`` run with this interpreter."""
    return [sys.executable, "-m", "conveyor_conformance.worker_program"]


async def probe_facts(
    url: str, token: str | None, protocol: str = "grpc", ca_file: str | None = None
) -> ServerFacts:
    """Open one session, read its Welcome, close it."""
    sess = await open_raw_session(url, token, protocol, ca_file)
    try:
        welcome = await sess.hello({"cf-probe": 1}, 1, within=15)
    finally:
        await sess.aclose()
    return ServerFacts(
        lease_ttl=welcome.lease_ttl.ToNanoseconds() / 1e9,
        heartbeat_interval=welcome.heartbeat_interval.ToNanoseconds() / 1e9,
        server_version=welcome.server_version,
        min_sdk_version=welcome.min_sdk_version,
        session_id=welcome.session_id,
    )


def stop_server(proc: object) -> int:
    """Stop a ServerProcess and close its output pipe; returns its exit code."""
    code = int(proc.stop())  # type: ignore[attr-defined]
    popen = getattr(proc, "proc", None)
    if popen is not None and popen.stdout is not None:
        popen.stdout.close()
    return code


async def _start_server(args: Sequence[str]) -> object:
    from conveyor_server_min.testing import ServerProcess

    proc = ServerProcess(args)
    await asyncio.to_thread(proc.start)
    return proc


@contextlib.asynccontextmanager
async def prepared_env(config: SuiteConfig, checks: Sequence[Check]) -> AsyncIterator[SuiteEnv]:
    """A ready SuiteEnv; servers the suite started are stopped on exit."""
    started: list[object] = []
    needs_auth = any(Requirement.AUTH_SERVER in c.requires for c in checks)
    try:
        if config.server is None:
            main = await _start_server(SHORT_TIMINGS)
            started.append(main)
            env = SuiteEnv(config=config, url=main.url, token=None, own_server=True)  # type: ignore[attr-defined]
            if needs_auth:
                token = secrets.token_urlsafe(16)
                auth = await _start_server(["--token", token, *SHORT_TIMINGS])
                started.append(auth)
                env.auth_url, env.auth_token = auth.url, token  # type: ignore[attr-defined]
        else:
            env = SuiteEnv(config=config, url=config.server.rstrip("/"), token=config.token)
            if config.token:
                env.auth_url, env.auth_token = env.url, config.token
        env.worker_cmd = shlex.split(config.worker_cmd) if config.worker_cmd else default_worker_cmd()
        env.api = ApiClient(env.url, env.token, ca_file=config.ca_file)
        await _probe_into(env)
        yield env
    finally:
        if "env" in locals() and env.api is not None:
            await env.api.aclose()
        for proc in reversed(started):
            await asyncio.to_thread(stop_server, proc)


async def _probe_into(env: SuiteEnv) -> None:
    try:
        env.facts = await probe_facts(env.url, env.token, env.config.protocol, env.config.ca_file)
    except (ConveyorError, ImportError, AssertionError) as exc:
        env.notes.append(f"could not read a Welcome from {env.url}: {exc}")
        log.warning("probe failed: %s", exc)


async def run_suite(
    config: SuiteConfig,
    *,
    on_start: Callable[[list[Check]], None] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> Summary:
    """Select, prepare and run: the whole of ``conveyor conformance run`` minus printing."""
    checks = default_registry().select(config.only)
    async with prepared_env(config, checks) as env:
        if on_start is not None:
            on_start(checks)
        results = await run_checks(checks, env, on_result=on_result)
    target = config.server or "conveyor_server_min (started by the suite)"
    return Summary(results=tuple(results), profile=config.profile, target=target)
