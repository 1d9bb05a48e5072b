"""Producer clients: :class:`Client` (asyncio) and :class:`SyncClient` (blocking, thread-safe).

Example::

    async with Client("http://localhost:8080", token="s3cret") as client:
        info = await client.enqueue("email:welcome", {"user_id": 42}, queue="emails", process_in=60)
        print(info.id, info.state)

    with SyncClient("http://localhost:8080") as client:       # Django/Flask views, scripts, threads
        client.enqueue("report:build", b"...", content_type="application/octet-stream")

Every option of protocol §6.1 is a keyword argument (see :class:`EnqueueOptions`)
validated on the client before any network call (:class:`ValidationError`, a
``ValueError``). Transport failures surface only as
:class:`~conveyor_sdk.errors.ConveyorError` subclasses; a duplicate is
:class:`~conveyor_sdk.errors.DuplicateTask`. ``unavailable`` is retried with
full-jitter backoff only for calls that are safe to repeat (GetTask, reads,
Enqueue with ``task_id``, EnqueueBatch and EnqueueTx when every item has a ``task_id``).
``enqueue``, ``enqueue_batch`` and ``enqueue_tx`` give every task a client-assigned ULID
when none was given, so they are always safe to repeat (see ``_client/repeat.py`` for how
a repeat that had committed is answered). Several server addresses (a list, or one comma-separated
string) make a client fail over: see docs/client.md, "Failover".
Operator calls live on ``client.admin``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypedDict, Unpack

import pyqwest

from conveyor_sdk._client import requests as rq
from conveyor_sdk._client.admin import AsyncAdmin, SyncAdmin
from conveyor_sdk._client.admin_types import (
    BrokerInfo,
    ClusterNode,
    ConcurrencyLimit,
    CronEntry,
    GroupConfig,
    RateLimit,
    ServerVersion,
    TaskEvent,
    TaskEventType,
)
from conveyor_sdk._client.admin_wire import CronOptions
from conveyor_sdk._client.connect_unary import ConnectWire
from conveyor_sdk._client.convert import enqueue_result, task_info
from conveyor_sdk._client.grpc_unary import GrpcWire
from conveyor_sdk._client.h2transport import H2Transport
from conveyor_sdk._client.ids import new_task_id
from conveyor_sdk._client.options import EnqueueOptions, TaskSpec, ValidationError
from conveyor_sdk._client.pyqwest_exchange import PyqwestExchange
from conveyor_sdk._client.repeat import duplicates, plausibly_ours, repeated, with_ids
from conveyor_sdk._client.retry import RetryConfig
from conveyor_sdk._client.seal import check_reserved, seal_request, seal_request_sync
from conveyor_sdk._client.transport import ClientConfig, Protocol, RoutedStub, UnaryCaller, WireFormat
from conveyor_sdk._client.unary import JSON, PROTO, Exchanger, UnaryStub, Wire
from conveyor_sdk._encryption.hooks import Encryptor, check_encryptor
from conveyor_sdk._gen.conveyor.v1 import service_connect as sc
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._protocol.backoff import parse_addresses
from conveyor_sdk._transport._connect import Dialer, dial_tcp
from conveyor_sdk._transport.keepalive import DEFAULT_INTERVAL, DEFAULT_TIMEOUT, KeepaliveOptions
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.errors import ConveyorError, DuplicateTask
from conveyor_sdk.types import Duration, EnqueueResult, TaskInfo

__all__ = [
    "AsyncAdmin",
    "BrokerInfo",
    "Client",
    "ClientOptions",
    "ClusterNode",
    "ConcurrencyLimit",
    "CronEntry",
    "CronOptions",
    "EnqueueOptions",
    "GroupConfig",
    "RateLimit",
    "RetryConfig",
    "ServerVersion",
    "SyncAdmin",
    "SyncClient",
    "TaskEvent",
    "TaskEventType",
    "TaskSpec",
    "ValidationError",
    "task",
]


def task(type: str, payload: Any = None, /, **options: Unpack[EnqueueOptions]) -> TaskSpec:
    """One item for :meth:`Client.enqueue_batch` / :meth:`Client.enqueue_tx`."""
    return TaskSpec(type, payload, **options)


class ClientOptions(TypedDict, total=False):
    """Connection options shared by :class:`Client` and :class:`SyncClient` (see :class:`Client`)."""

    token: str | None
    timeout: Duration | None
    protocol: Protocol
    wire_format: WireFormat
    retry: RetryConfig | None
    codecs: CodecRegistry | None
    headers: Mapping[str, str] | None
    tls_ca_cert: bytes | None
    http2: bool
    trace: bool
    encryption: Encryptor | None
    keepalive_interval: Duration
    keepalive_timeout: Duration


_KEEPALIVE_KEYS = ("keepalive_interval", "keepalive_timeout")


def _keepalive(options: Mapping[str, Any]) -> KeepaliveOptions:
    """The async client's PING settings (defaults 5 s / 10 s, as the worker's); ValueError if bad."""
    interval = _positive("keepalive_interval", options.get("keepalive_interval", DEFAULT_INTERVAL))
    timeout = _positive("keepalive_timeout", options.get("keepalive_timeout", DEFAULT_TIMEOUT))
    return KeepaliveOptions(interval, timeout)  # checks > 0 and finite


def _positive(name: str, value: object) -> float:
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a positive number of seconds or a timedelta, got {value!r}")
    return float(value)


def _seconds(value: Duration | None) -> float | None:
    if value is None:
        return None
    return value.total_seconds() if hasattr(value, "total_seconds") else float(value)


def _landed_earlier(exc: DuplicateTask, req: pb.EnqueueRequest) -> bool:
    """An Enqueue with task_id that hit ``already_exists`` only after a repeat (retry or failover).

    The earlier attempt most likely committed the task and only its answer was
    lost, so the duplicate is our own: read the task back instead of failing.
    A duplicate on the first attempt that reached a server is always raised (a user's id
    that is taken), also after attempts whose connection could not be opened.
    """
    return bool(req.task_id) and exc.details.get("sent_attempts", 1) > 1


def _with_id(req: pb.EnqueueRequest) -> pb.EnqueueRequest:
    """Give an Enqueue without ``task_id`` a client-assigned ULID: repeating it is then harmless."""
    if not req.task_id:
        req.task_id = new_task_id()
    return req


def _one(stubs: list[Any], ring_of: UnaryCaller) -> Any:
    """The stub itself for one address; a :class:`RoutedStub` over all of them otherwise."""
    return stubs[0] if len(stubs) == 1 else RoutedStub(ring_of.ring, stubs)


def _check_same(exc: DuplicateTask, req: pb.EnqueueRequest, stored: pb.TaskInfo) -> pb.TaskInfo:
    """The stored task if it is plausibly ours (same type and queue), else the original error."""
    if stored.type != req.type or stored.queue != (req.queue or "default"):
        raise exc
    return stored


def _pick(own: Encryptor | None, spec: TaskSpec) -> Encryptor | None:
    """The client's encryption, else the one a typed task's App attached to its spec."""
    return own if own is not None else spec.encryption


_TASK_SERVICE = pb.DESCRIPTOR.services_by_name["TaskService"]


def _check_dialer(dialer: object, transport: object, config: ClientConfig) -> None:
    """A ``dialer=`` must be callable, and it only opens HTTP/2 connections we make ourselves."""
    if dialer is None:
        return
    if not callable(dialer):
        raise TypeError(f"dialer must be a callable like MemoryServer.dial, got {type(dialer).__name__}")
    if transport is not None:
        raise TypeError("give dialer= or transport=, not both: each replaces how calls reach the server")
    if not config.http2:
        raise ValueError("dialer= opens HTTP/2 connections; http2=False (HTTP/1.1) cannot use it")


def _wire(config: ClientConfig) -> Wire:
    """The framing of the configured protocol, with the configured codec."""
    codec = JSON if config.wire_format == "json" else PROTO
    return GrpcWire(codec) if config.protocol == "grpc" else ConnectWire(codec)


class _Base:
    """Configuration, codecs and request building shared by both clients."""

    def __init__(self, address: str | Sequence[str], **options: Unpack[ClientOptions]) -> None:
        unknown = sorted(set(options) - set(ClientOptions.__optional_keys__))
        if unknown:
            raise TypeError(f"unknown client option(s): {', '.join(unknown)}")
        addresses = parse_addresses(address)
        self._config = ClientConfig(
            address=addresses[0],
            addresses=addresses,
            token=options.get("token"),
            protocol=options.get("protocol", "connect"),
            wire_format=options.get("wire_format", "proto"),
            timeout=_seconds(options.get("timeout", 30.0)),
            retry=options.get("retry") or RetryConfig(),
            headers=dict(options.get("headers") or {}),
            tls_ca_cert=options.get("tls_ca_cert"),
            http2=options.get("http2", True),
        )
        self._caller = UnaryCaller(self._config)
        codecs = options.get("codecs")
        self.codecs = codecs if codecs is not None else CodecRegistry.default()
        self._trace = options.get("trace", True)
        self.encryption = check_encryptor(options.get("encryption"))
        self._keepalive = _keepalive(options)
        self._closed = False

    @classmethod
    def from_env(cls, **options: Unpack[ClientOptions]) -> Self:
        """Address from ``CONVEYOR_ADDR`` (default http://localhost:8080), token from ``CONVEYOR_TOKEN``."""
        options.setdefault("token", os.environ.get("CONVEYOR_TOKEN") or None)
        return cls(os.environ.get("CONVEYOR_ADDR", "http://localhost:8080"), **options)

    @property
    def address(self) -> str:
        """The server URL calls go to now (the first one until a call failed over)."""
        return self._config.addresses[self._caller.ring.index]

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every server URL this client fails over between, in order."""
        return self._config.addresses

    def _enqueue_request(self, type: str, payload: Any, options: Mapping[str, Any]) -> pb.EnqueueRequest:
        return rq.enqueue(type, payload, options, self.codecs, trace=self._trace)

    def _items(self, tasks: Sequence[TaskSpec], what: str) -> list[pb.EnqueueRequest]:
        return rq.enqueue_items(tasks, self.codecs, trace=self._trace, what=what)

    def statistics(self) -> dict[str, Any]:
        """Counters: calls made (attempts), retries after ``unavailable``, moves to another address."""
        caller = self._caller
        return {
            "address": self.address,
            "calls": caller.calls,
            "retries": caller.retries,
            "failovers": caller.failovers,
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        cfg = self._config
        return f"<{type(self).__name__} {self.address} {cfg.protocol}/{cfg.wire_format} {state}>"


class Client(_Base):
    """Asyncio producer client. Use ``async with`` or call :meth:`aclose`.

    Args:
        address: ``http://host:port`` (h2c) or ``https://host`` (TLS); several (a cluster's
            nodes) as a list or a comma-separated string: calls go to one until it fails,
            then move on (docs/client.md, "Failover").
        token: bearer token sent on every call.
        timeout: default per-attempt call timeout (seconds or timedelta; None = no limit).
        protocol: ``"connect"`` (default) or ``"grpc"``.
        wire_format: ``"proto"`` (default) or ``"json"``.
        retry: retry budget for safe calls after ``unavailable``.
        codecs: payload codecs (default: JSON, octet-stream, protobuf).
        headers: extra headers for every call.
        tls_ca_cert: PEM CA bundle for https (default: system roots).
        http2: False to use HTTP/1.1 (Connect protocol only).
        trace: inject the current OpenTelemetry trace context into task metadata.
        encryption: seal every non-empty payload end to end (a
            :class:`~conveyor_sdk.encryption.Keyring` or any ``Encryptor``); see
            :mod:`conveyor_sdk.encryption`.
        keepalive_interval / keepalive_timeout: the HTTP/2 PINGs of task calls' connections
            (seconds or timedelta; 5 and 10, as the worker's): the first call after the
            connection was idle ``keepalive_interval`` carries a PING, and one follows every
            interval while calls are open; one unanswered for ``keepalive_timeout`` fails the
            open calls with a retryable ``Unavailable`` and the next call opens a fresh
            connection. ValueError if not a positive number. Not accepted by
            :class:`SyncClient` (its connections have no PING: calls end by their deadline).
        transport: a pyqwest transport to use instead of a network one (tests).
        dialer: opens this client's connections instead of TCP, for tests and in-process use,
            e.g. ``MemoryServer.dial`` (:mod:`conveyor_sdk.testing.memory`; or
            ``MemoryServer.client()``). Every call goes there: task calls, ``client.admin``
            (AdminService, ``watch_events`` included, on the same HTTP/2 transport) and
            ``admin.server_version``'s handshake; nothing goes to the network. HTTP/2 only:
            TypeError if not callable or given with ``transport``, ValueError with ``http2=False``.
    """

    def __init__(
        self,
        address: str,
        *,
        transport: pyqwest.Transport | None = None,
        dialer: Dialer | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(address, **options)
        _check_dialer(dialer, transport, self._config)
        self._owned = transport is None
        self._dialer = dialer
        self._h2s: list[H2Transport] = []
        ckw = self._config.connect_kwargs()
        tasks, admins = [], []
        if dialer is None:
            self._transport = transport or pyqwest.HTTPTransport(**self._config.transport_kwargs())
            http = pyqwest.Client(self._transport)
            for url in self._config.addresses:
                tasks.append(self._task_stub(url))
                admins.append(sc.AdminServiceClient(url, http_client=http, **ckw))
        else:
            for url in self._config.addresses:
                h2 = self._h2_transport(url, dialer)
                tasks.append(UnaryStub(h2, _TASK_SERVICE, _wire(self._config)))
                # H2Transport is also a pyqwest Transport: the admin calls share its connection.
                admins.append(sc.AdminServiceClient(url, http_client=pyqwest.Client(h2), **ckw))
        self._h2 = self._h2s[0] if self._h2s else None
        self._tasks: Any = _one(tasks, self._caller)  # a UnaryStub, or a RoutedStub over one per address
        self.admin = AsyncAdmin(self._caller, _one(admins, self._caller), self.codecs, dialer=dialer)

    def _h2_transport(self, url: str, dialer: Dialer = dial_tcp) -> H2Transport:
        h2 = H2Transport(url, ca_pem=self._config.tls_ca_cert, keepalive=self._keepalive, dialer=dialer)
        self._h2s.append(h2)
        return h2

    def _task_stub(self, url: str) -> UnaryStub:
        """Every task call (the producer's hot path) runs on one stub, whatever the protocol and format.

        The bytes move on our asyncio HTTP/2 transport (no thread hop), except over HTTP/1.1 and
        on a transport the caller gave, which stay pyqwest's (docs/client.md, "Transport")."""
        cfg = self._config
        exchanger: Exchanger
        if self._owned and cfg.http2:
            exchanger = self._h2_transport(url)
        else:
            exchanger = PyqwestExchange(self._transport, url)
        return UnaryStub(exchanger, _TASK_SERVICE, _wire(cfg))

    async def enqueue(
        self, type: str, payload: Any = None, /, *, rpc_timeout: Duration | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> TaskInfo:  # fmt: skip
        """Enqueue one task; returns the committed TaskInfo (PENDING, SCHEDULED, BLOCKED...)."""
        return await self._enqueue(type, payload, options, rpc_timeout, self.encryption)

    async def _enqueue(
        self,
        type: str,
        payload: Any,
        options: Mapping[str, Any],
        rpc_timeout: Duration | None,
        encryption: Encryptor | None,
    ) -> TaskInfo:
        req = _with_id(self._enqueue_request(type, payload, options))
        if encryption is None:
            check_reserved(req)  # seal_request's whole work without an encryptor, minus a coroutine
        else:
            await seal_request(req, encryption)
        try:
            resp = await self._caller.acall("Enqueue", self._tasks.enqueue, req, _seconds(rpc_timeout))
        except DuplicateTask as exc:
            if not _landed_earlier(exc, req):
                raise
            get = pb.GetTaskRequest(id=req.task_id)
            stored = (await self._caller.acall("GetTask", self._tasks.get_task, get)).task
            return task_info(_check_same(exc, req, stored))
        return task_info(resp.task)

    async def enqueue_batch(
        self, tasks: Sequence[TaskSpec], *, rpc_timeout: Duration | None = None
    ) -> list[EnqueueResult]:
        """Enqueue 1..1000 tasks that succeed or fail independently (results in order)."""
        req = pb.EnqueueBatchRequest(tasks=await self._sealed(tasks, "enqueue_batch"))
        sent: list[int] = []
        resp = await self._caller.acall(
            "EnqueueBatch", self._tasks.enqueue_batch, req, _seconds(rpc_timeout), sent=sent
        )
        results = [enqueue_result(r) for r in resp.results]
        for i in duplicates(req.tasks, resp.results) if repeated(sent) else ():
            stored = await self._stored(req.tasks[i].task_id)
            if stored is not None and plausibly_ours(req.tasks[i], stored):
                results[i] = EnqueueResult(task=task_info(stored))  # our earlier attempt committed it
        return results

    async def enqueue_tx(
        self, tasks: Sequence[TaskSpec], *, rpc_timeout: Duration | None = None
    ) -> list[TaskInfo]:
        """Enqueue 1..1000 tasks atomically: all are committed or none (error raised)."""
        req = pb.EnqueueTxRequest(tasks=await self._sealed(tasks, "enqueue_tx"))
        # Every item has an id (see _sealed), so a repeat is a no-op on both servers (§6.1).
        resp = await self._caller.acall("EnqueueTx", self._tasks.enqueue_tx, req, _seconds(rpc_timeout))
        return [task_info(t) for t in resp.tasks]

    async def _stored(self, task_id: str) -> pb.TaskInfo | None:
        try:
            req = pb.GetTaskRequest(id=task_id)
            resp: pb.GetTaskResponse = await self._caller.acall("GetTask", self._tasks.get_task, req)
        except ConveyorError:
            return None
        return resp.task

    async def _sealed(self, tasks: Sequence[TaskSpec], what: str) -> list[pb.EnqueueRequest]:
        items = with_ids(self._items(tasks, what))
        for spec, req in zip(tasks, items, strict=True):
            await seal_request(req, _pick(self.encryption, spec))
        return items

    async def get_task(self, id: str, *, rpc_timeout: Duration | None = None) -> TaskInfo:
        """Fetch one task; :class:`~conveyor_sdk.errors.NotFound` when unknown."""
        req = pb.GetTaskRequest(id=rq.task_id(id))
        resp = await self._caller.acall("GetTask", self._tasks.get_task, req, _seconds(rpc_timeout))
        return task_info(resp.task)

    async def aclose(self) -> None:
        """Release connections (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for h2 in self._h2s:
            await h2.aclose()
        if self._dialer is None and self._owned and isinstance(self._transport, pyqwest.HTTPTransport):
            await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class SyncClient(_Base):
    """Blocking producer client, safe to share between threads. Same arguments as :class:`Client`."""

    def __init__(
        self,
        address: str,
        *,
        transport: pyqwest.SyncTransport | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        given = [k for k in _KEEPALIVE_KEYS if k in options]
        if given:
            raise TypeError(
                f"{', '.join(given)}: the blocking SyncClient sends no HTTP/2 PINGs (its calls end by their"
                " deadline, timeout / rpc_timeout); the keepalive options are the async Client's"
            )
        super().__init__(address, **options)
        self._owned = transport is None
        self._transport = transport or pyqwest.SyncHTTPTransport(**self._config.transport_kwargs())
        http = pyqwest.SyncClient(self._transport)
        ckw = self._config.connect_kwargs()
        urls = self._config.addresses
        self._tasks = _one([sc.TaskServiceClientSync(u, http_client=http, **ckw) for u in urls], self._caller)
        admins = [sc.AdminServiceClientSync(u, http_client=http, **ckw) for u in urls]
        self.admin = SyncAdmin(self._caller, _one(admins, self._caller), self.codecs)

    def enqueue(
        self, type: str, payload: Any = None, /, *, rpc_timeout: Duration | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> TaskInfo:  # fmt: skip
        """Enqueue one task; returns the committed TaskInfo."""
        return self._enqueue(type, payload, options, rpc_timeout, self.encryption)

    def _enqueue(
        self,
        type: str,
        payload: Any,
        options: Mapping[str, Any],
        rpc_timeout: Duration | None,
        encryption: Encryptor | None,
    ) -> TaskInfo:
        req = _with_id(self._enqueue_request(type, payload, options))
        seal_request_sync(req, encryption)
        try:
            resp = self._caller.call("Enqueue", self._tasks.enqueue, req, _seconds(rpc_timeout))
        except DuplicateTask as exc:
            if not _landed_earlier(exc, req):
                raise
            get = pb.GetTaskRequest(id=req.task_id)
            stored = self._caller.call("GetTask", self._tasks.get_task, get).task
            return task_info(_check_same(exc, req, stored))
        return task_info(resp.task)

    def enqueue_batch(
        self, tasks: Sequence[TaskSpec], *, rpc_timeout: Duration | None = None
    ) -> list[EnqueueResult]:
        """Enqueue 1..1000 independent tasks (results in order)."""
        req = pb.EnqueueBatchRequest(tasks=self._sealed(tasks, "enqueue_batch"))
        sent: list[int] = []
        timeout = _seconds(rpc_timeout)
        resp = self._caller.call("EnqueueBatch", self._tasks.enqueue_batch, req, timeout, sent=sent)
        results = [enqueue_result(r) for r in resp.results]
        for i in duplicates(req.tasks, resp.results) if repeated(sent) else ():
            stored = self._stored(req.tasks[i].task_id)
            if stored is not None and plausibly_ours(req.tasks[i], stored):
                results[i] = EnqueueResult(task=task_info(stored))  # our earlier attempt committed it
        return results

    def enqueue_tx(self, tasks: Sequence[TaskSpec], *, rpc_timeout: Duration | None = None) -> list[TaskInfo]:
        """Enqueue 1..1000 tasks atomically."""
        req = pb.EnqueueTxRequest(tasks=self._sealed(tasks, "enqueue_tx"))
        # Every item has an id (see _sealed), so a repeat is a no-op on both servers (§6.1).
        resp = self._caller.call("EnqueueTx", self._tasks.enqueue_tx, req, _seconds(rpc_timeout))
        return [task_info(t) for t in resp.tasks]

    def _stored(self, task_id: str) -> pb.TaskInfo | None:
        try:
            req = pb.GetTaskRequest(id=task_id)
            resp: pb.GetTaskResponse = self._caller.call("GetTask", self._tasks.get_task, req)
        except ConveyorError:
            return None
        return resp.task

    def _sealed(self, tasks: Sequence[TaskSpec], what: str) -> list[pb.EnqueueRequest]:
        items = with_ids(self._items(tasks, what))
        for spec, req in zip(tasks, items, strict=True):
            seal_request_sync(req, _pick(self.encryption, spec))
        return items

    def get_task(self, id: str, *, rpc_timeout: Duration | None = None) -> TaskInfo:
        """Fetch one task; NotFound when unknown."""
        req = pb.GetTaskRequest(id=rq.task_id(id))
        return task_info(self._caller.call("GetTask", self._tasks.get_task, req, _seconds(rpc_timeout)).task)

    def close(self) -> None:
        """Release connections (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._owned and isinstance(self._transport, pyqwest.SyncHTTPTransport):
            self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
