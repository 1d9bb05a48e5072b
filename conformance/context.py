"""What a running check can use: the target, server facts, and per-check helpers.

:class:`SuiteEnv` is shared by every check in a run (target URLs, token,
Welcome facts, worker command). :class:`CheckContext` is per check: its own
queue name (so concurrent checks never see each other's tasks), sessions and
processes that are closed when the check ends, and small assertion helpers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from conveyor_conformance._api import ApiClient
from conveyor_conformance._session import RawSession, open_raw_session
from conveyor_conformance.model import Check, CheckFailed, NotApplicable, Requirement
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.errors import ConveyorError

__all__ = ["CheckContext", "ServerFacts", "SuiteConfig", "SuiteEnv"]

T = TypeVar("T")

RETENTION_S = 3600
SHORT_LEASE_MAX = 2.5


@dataclass(frozen=True, slots=True)
class SuiteConfig:
    """User-facing run options (what ``conveyor conformance run`` parses)."""

    server: str | None = None
    token: str | None = None
    worker_cmd: str | None = None
    only: tuple[str, ...] = ()
    profile: str = "strict"  # strict | upstream
    protocol: str = "grpc"  # session wire protocol for raw server checks
    concurrency: int = 6  # checks running at once
    timing_scale: float = 1.0  # multiply waits on slow machines
    declares: tuple[str, ...] | None = None  # worker extensions; None = read the program's declaration
    ca_file: str | None = (
        None  # PEM bundle trusted for an https:// server (also passed to the worker program)
    )


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What the Welcome of a probe session told us."""

    lease_ttl: float
    heartbeat_interval: float
    server_version: str
    min_sdk_version: str
    session_id: str


@dataclass(slots=True)
class SuiteEnv:
    """Shared state for one run."""

    config: SuiteConfig
    url: str
    token: str | None
    facts: ServerFacts | None = None
    own_server: bool = False
    auth_url: str | None = None  # a server that requires ``auth_token``
    auth_token: str | None = None
    worker_cmd: list[str] | None = None
    worker_env: dict[str, str] = field(default_factory=dict)
    api: ApiClient | None = None
    notes: list[str] = field(default_factory=list)
    declared: frozenset[str] | None = None  # worker-program extensions (conveyor_conformance.declare)
    declared_from: str = ""

    def undeclared(self, names: frozenset[str]) -> str:
        """Why a check needing extensions ``names`` is n/a ('' when all are declared)."""
        missing = sorted(n for n in names if n not in (self.declared or frozenset()))
        if not missing:
            return ""
        return f"n/a (program does not declare {', '.join(missing)})"

    def missing(self, requires: frozenset[Requirement]) -> str:
        """Why the environment cannot run a check with ``requires`` ('' when it can)."""
        for req in sorted(requires, key=lambda r: r.value):
            reason = self._missing_one(req)
            if reason:
                return reason
        return ""

    def _missing_one(self, req: Requirement) -> str:
        if req is Requirement.SHORT_LEASE and (self.facts is None or self.facts.lease_ttl > SHORT_LEASE_MAX):
            got = "unknown" if self.facts is None else f"{self.facts.lease_ttl:g} s"
            return f"not applicable: needs a 2 s lease (server lease_ttl is {got})"
        if req is Requirement.AUTH_SERVER and not (self.auth_url and self.auth_token):
            return "not applicable: needs a server with a token (--token)"
        if req is Requirement.WORKER_CMD and not self.worker_cmd:
            return "not applicable: needs --worker-cmd"
        return ""


_seq = itertools.count(1)


class CheckContext:
    """Per-check helpers; everything opened through it is closed when the check ends."""

    def __init__(self, env: SuiteEnv, check: Check) -> None:
        self.env = env
        self.check = check
        slug = check.id.split(".")[-1][:24].strip("-")
        self.queue = f"cf-{slug}-{next(_seq)}-{secrets.token_hex(2)}"
        self.scale = env.config.timing_scale
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.notes: list[str] = []

    @property
    def api(self) -> ApiClient:
        """Unary client for the target server."""
        assert self.env.api is not None
        return self.env.api

    @property
    def lease_ttl(self) -> float:
        """The server's lease TTL (seconds)."""
        return self.env.facts.lease_ttl if self.env.facts else 60.0

    @property
    def heartbeat_interval(self) -> float:
        """The server's advertised heartbeat interval (seconds)."""
        return self.env.facts.heartbeat_interval if self.env.facts else 20.0

    def declares(self, name: str) -> bool:
        """True when the worker program declared extension ``name`` (see conveyor_conformance.declare)."""
        return name in (self.env.declared or frozenset())

    def need(self, name: str, why: str = "") -> None:
        """Raise NotApplicable unless the worker program declared ``name``."""
        if not self.declares(name):
            raise NotApplicable(f"n/a (program does not declare {name}){': ' + why if why else ''}")

    def t(self, seconds: float) -> float:
        """A wait scaled for slow machines."""
        return seconds * self.scale

    def on_close(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` when the check ends (LIFO)."""
        self._closers.append(fn)

    async def aclose(self) -> None:
        """Close everything this check opened; never raises."""
        for fn in reversed(self._closers):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(fn(), 10)
        self._closers.clear()

    # --- sessions ---------------------------------------------------------------------------

    async def session(
        self, *, url: str | None = None, token: Any = "__env__", protocol: str | None = None
    ) -> RawSession:
        """Open a raw session (closed when the check ends)."""
        tok = self.env.token if token == "__env__" else token
        config = self.env.config
        sess = await open_raw_session(url or self.env.url, tok, protocol or config.protocol, config.ca_file)
        self.on_close(sess.aclose)
        return sess

    async def worker_session(self, concurrency: int = 1, **hello: Any) -> tuple[RawSession, pb.Welcome]:
        """A session that said Hello for this check's queue."""
        queues = hello.pop("queues", {self.queue: 1})
        sess = await self.session()
        welcome = await sess.hello(queues, concurrency, **hello)
        return sess, welcome

    # --- tasks ------------------------------------------------------------------------------

    async def enqueue(self, **fields: Any) -> pb.TaskInfo:
        """Enqueue on this check's queue with retention 1 h unless overridden."""
        return await self.api.enqueue(**self.request_fields(**fields))

    def request(self, **fields: Any) -> pb.EnqueueRequest:
        """An EnqueueRequest with this check's defaults."""
        return pb.EnqueueRequest(**self.request_fields(**fields))

    def request_fields(self, **fields: Any) -> dict[str, Any]:
        """Keyword fields with the check's queue/type/retention defaults filled in."""
        fields.setdefault("queue", self.queue)
        fields.setdefault("type", "conformance:task")
        if "retention" not in fields:
            fields["retention"] = _duration(RETENTION_S)
        return fields

    async def wait_task(
        self, task_id: str, pred: Callable[[pb.TaskInfo], bool], what: str, within: float = 10.0
    ) -> pb.TaskInfo:
        """Poll GetTask until ``pred`` holds; CheckFailed naming the last state otherwise."""
        loop = asyncio.get_running_loop()
        end = loop.time() + self.t(within)
        last: pb.TaskInfo | None = None
        while True:
            last = await self.api.get_task(task_id)
            if pred(last):
                return last
            if loop.time() > end:
                raise CheckFailed(f"task never became {what} within {within:g}s; last: {describe(last)}")
            await asyncio.sleep(0.05)

    # --- assertions -------------------------------------------------------------------------

    @staticmethod
    def expect(condition: object, message: str) -> None:
        """Raise CheckFailed(message) unless ``condition``."""
        if not condition:
            raise CheckFailed(message)

    @staticmethod
    async def expect_error(code: str, call: Awaitable[Any], what: str) -> ConveyorError:
        """``call`` must fail with Connect code ``code``."""
        try:
            await call
        except ConveyorError as exc:
            if exc.code.connect_name != code:
                got = f"{exc.code.connect_name}: {exc.message}"
                raise CheckFailed(f"{what}: expected {code}, got {got}") from None
            return exc
        raise CheckFailed(f"{what}: expected {code}, but the call succeeded")


def _duration(seconds: float) -> Any:
    from google.protobuf import duration_pb2

    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def describe(info: pb.TaskInfo) -> str:
    """One-line view of a TaskInfo for failure details."""
    state = tpb.TaskState.Name(info.state) if info.state in tpb.TaskState.values() else str(info.state)
    err = f" last_error={info.last_error!r}" if info.last_error else ""
    return f"state={state} retried={info.retried}{err}"


def env_flag(name: str) -> bool:
    """True when environment variable ``name`` is set to a truthy value."""
    return os.environ.get(name, "").lower() in {"1", "true", "yes"}
