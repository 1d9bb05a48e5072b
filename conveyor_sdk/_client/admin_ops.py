"""Cron, rate/concurrency limits, group configs, cluster info and live events for ``client.admin``.

Mixed into :class:`~conveyor_sdk._client.admin.AsyncAdmin` / ``SyncAdmin``. Only public
conveyor.v1 AdminService RPCs (plus one WorkerService handshake for :meth:`server_version`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import tempfile
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Unpack

from conveyor_sdk._client import admin_wire as aw
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
from conveyor_sdk._client.requests import queue_name
from conveyor_sdk._client.transport import UnaryCaller, translate
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.errors import ConveyorError, DeadlineExceeded, Internal, NotFound
from conveyor_sdk.types import Duration

if TYPE_CHECKING:
    from conveyor_sdk._transport._connect import Dialer

__all__ = ["AsyncOps", "SyncOps"]

PROBE_QUEUE_PREFIX = "conveyor-version-probe-"


def _method(rpc: str) -> str:
    """``SetQueueRateLimit`` -> ``set_queue_rate_limit`` (the generated client's method name)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rpc).lower()


def _find_cron(entries: list[CronEntry], id: str) -> CronEntry:
    for entry in entries:
        if entry.id == id:
            return entry
    raise NotFound(f"cron entry {id!r} not found")


class _OpsBase:
    _caller: UnaryCaller
    _stub: Any
    _codecs: CodecRegistry
    _dialer: Dialer | None = None  # the Client's dialer=: server_version's handshake goes there too

    def _cron(self, head: tuple[str, str, str], payload: Any, options: Any, paused: bool) -> Any:
        entry = aw.cron_entry_message(head, payload, options, self._codecs, paused=paused)
        return pb.UpsertCronRequest(entry=entry)


class AsyncOps(_OpsBase):
    """Async operator calls beyond tasks and queues."""

    async def _rpc(self, rpc: str, req: Any) -> Any:
        return await self._caller.acall(rpc, getattr(self._stub, _method(rpc)), req)

    # -- cron ---------------------------------------------------------------------------------------
    async def list_cron(self) -> list[CronEntry]:
        """Every cron entry (``next_run_at`` None until the server's scheduler arms it)."""
        resp = await self._rpc("ListCron", pb.ListCronRequest())
        return [aw.cron_entry(e) for e in resp.entries]

    async def get_cron(self, id: str) -> CronEntry:
        """One entry (there is no GetCron RPC: this filters ListCron); NotFound when absent."""
        return _find_cron(await self.list_cron(), id)

    async def upsert_cron(
        self, id: str, spec: str, type: str, payload: Any = None, /, *, paused: bool = False,
        **options: Unpack[aw.CronOptions],
    ) -> None:  # fmt: skip
        """Create or replace entry ``id`` firing ``type`` on ``spec`` (6 fields, seconds first)."""
        await self._rpc("UpsertCron", self._cron((id, spec, type), payload, options, paused))

    async def pause_cron(self, id: str) -> None:
        """Stop entry ``id`` from firing (NotFound when absent)."""
        await self._rpc("PauseCron", pb.PauseCronRequest(id=id))

    async def resume_cron(self, id: str) -> None:
        """Re-arm entry ``id`` from now (NotFound when absent)."""
        await self._rpc("ResumeCron", pb.ResumeCronRequest(id=id))

    async def delete_cron(self, id: str) -> None:
        """Remove entry ``id`` (absent is not an error)."""
        await self._rpc("DeleteCron", pb.DeleteCronRequest(id=id))

    # -- limits and groups --------------------------------------------------------------------------
    async def list_rate_limits(self) -> list[RateLimit]:
        """Per-queue rate overrides."""
        resp = await self._rpc("ListRateLimits", pb.ListRateLimitsRequest())
        return [aw.rate_limit(x) for x in resp.limits]

    async def set_rate_limit(self, queue: str, rate_per_sec: float, *, burst: int = 1) -> None:
        """Dispatch at most ``rate_per_sec`` tasks/s from ``queue`` (token bucket of ``burst``)."""
        await self._rpc("SetQueueRateLimit", aw.rate_request(queue, rate_per_sec, burst))

    async def delete_rate_limit(self, queue: str) -> None:
        """Drop the override (the server's global default applies again)."""
        await self._rpc("DeleteQueueRateLimit", pb.DeleteQueueRateLimitRequest(queue=queue_name(queue)))

    async def list_concurrency_limits(self) -> list[ConcurrencyLimit]:
        """Per-queue, per-key concurrency limits."""
        resp = await self._rpc("ListConcurrencyLimits", pb.ListConcurrencyLimitsRequest())
        return [aw.concurrency_limit(x) for x in resp.limits]

    async def set_concurrency_limit(self, queue: str, max_active: int) -> None:
        """At most ``max_active`` tasks per ``concurrency_key`` active at once on ``queue``."""
        await self._rpc("SetQueueConcurrencyLimit", aw.concurrency_request(queue, max_active))

    async def delete_concurrency_limit(self, queue: str) -> None:
        """Drop the limit (keys on ``queue`` become unbounded)."""
        req = pb.DeleteQueueConcurrencyLimitRequest(queue=queue_name(queue))
        await self._rpc("DeleteQueueConcurrencyLimit", req)

    async def list_group_configs(self) -> list[GroupConfig]:
        """Per-group aggregation overrides."""
        resp = await self._rpc("ListGroupConfigs", pb.ListGroupConfigsRequest())
        return [aw.group_config(x) for x in resp.configs]

    async def set_group_config(
        self, queue: str, group: str = "", *, max_size: int, max_delay: Duration, grace_period: Duration
    ) -> None:
        """Override aggregation thresholds (``group=""``: the queue-wide default)."""
        await self._rpc("SetGroupConfig", aw.group_request(queue, group, max_size, max_delay, grace_period))

    async def delete_group_config(self, queue: str, group: str = "") -> None:
        """Drop an override (absent is not an error)."""
        req = pb.DeleteGroupConfigRequest(queue=queue_name(queue), group=group)
        await self._rpc("DeleteGroupConfig", req)

    # -- info and events ----------------------------------------------------------------------------
    async def cluster_info(self) -> list[ClusterNode]:
        """The server nodes."""
        return aw.cluster_nodes(await self._rpc("ClusterInfo", pb.ClusterInfoRequest()))

    async def broker_info(self) -> BrokerInfo:
        """Storage driver and metrics."""
        return aw.broker_info(await self._rpc("BrokerInfo", pb.BrokerInfoRequest()))

    async def server_version(self, *, timeout: float = 10.0) -> ServerVersion:  # noqa: ASYNC109  # bounds the handshake
        """The server's build version, from the ``Welcome`` of a short worker-session handshake.

        conveyor.v1 reports the version nowhere else. The probe session declares one private
        queue (``conveyor-version-probe-<random>``) that no task is ever enqueued on, so it can
        never receive work, and is closed as soon as ``Welcome`` arrives.
        """
        return await _probe(self._caller, timeout, self._dialer)

    async def watch_events(
        self, *, queues: Iterable[str] = (), event_types: Iterable[TaskEventType | str] = ()
    ) -> AsyncIterator[TaskEvent]:
        """Live lifecycle events (WatchEvents) until the stream ends; failures are ConveyorErrors.

        The stream has no call timeout. It does not resume by itself: after ``Unavailable`` (e.g. a
        server restart) call again; events in between are not replayed.
        """
        req = aw.watch_request(queues, event_types)
        stream = self._stub.watch_events(req, headers=self._caller.headers, timeout_ms=None)
        try:
            async for msg in stream:
                yield aw.task_event(msg)
        except (ConveyorError, asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:
            if isinstance(exc.__cause__, asyncio.CancelledError):
                raise asyncio.CancelledError() from exc
            raise translate(exc) from exc
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()


class SyncOps(_OpsBase):
    """Blocking twin of :class:`AsyncOps`."""

    def _rpc(self, rpc: str, req: Any) -> Any:
        return self._caller.call(rpc, getattr(self._stub, _method(rpc)), req)

    def list_cron(self) -> list[CronEntry]:
        """Every cron entry."""
        return [aw.cron_entry(e) for e in self._rpc("ListCron", pb.ListCronRequest()).entries]

    def get_cron(self, id: str) -> CronEntry:
        """One entry; NotFound when absent."""
        return _find_cron(self.list_cron(), id)

    def upsert_cron(
        self, id: str, spec: str, type: str, payload: Any = None, /, *, paused: bool = False,
        **options: Unpack[aw.CronOptions],
    ) -> None:  # fmt: skip
        """Create or replace a cron entry."""
        self._rpc("UpsertCron", self._cron((id, spec, type), payload, options, paused))

    def pause_cron(self, id: str) -> None:
        """Stop an entry from firing."""
        self._rpc("PauseCron", pb.PauseCronRequest(id=id))

    def resume_cron(self, id: str) -> None:
        """Re-arm an entry from now."""
        self._rpc("ResumeCron", pb.ResumeCronRequest(id=id))

    def delete_cron(self, id: str) -> None:
        """Remove an entry."""
        self._rpc("DeleteCron", pb.DeleteCronRequest(id=id))

    def list_rate_limits(self) -> list[RateLimit]:
        """Per-queue rate overrides."""
        return [aw.rate_limit(x) for x in self._rpc("ListRateLimits", pb.ListRateLimitsRequest()).limits]

    def set_rate_limit(self, queue: str, rate_per_sec: float, *, burst: int = 1) -> None:
        """Limit a queue's dispatch rate."""
        self._rpc("SetQueueRateLimit", aw.rate_request(queue, rate_per_sec, burst))

    def delete_rate_limit(self, queue: str) -> None:
        """Drop a rate override."""
        self._rpc("DeleteQueueRateLimit", pb.DeleteQueueRateLimitRequest(queue=queue_name(queue)))

    def list_concurrency_limits(self) -> list[ConcurrencyLimit]:
        """Per-queue concurrency limits."""
        resp = self._rpc("ListConcurrencyLimits", pb.ListConcurrencyLimitsRequest())
        return [aw.concurrency_limit(x) for x in resp.limits]

    def set_concurrency_limit(self, queue: str, max_active: int) -> None:
        """Limit active tasks per concurrency key."""
        self._rpc("SetQueueConcurrencyLimit", aw.concurrency_request(queue, max_active))

    def delete_concurrency_limit(self, queue: str) -> None:
        """Drop a concurrency limit."""
        req = pb.DeleteQueueConcurrencyLimitRequest(queue=queue_name(queue))
        self._rpc("DeleteQueueConcurrencyLimit", req)

    def list_group_configs(self) -> list[GroupConfig]:
        """Per-group aggregation overrides."""
        resp = self._rpc("ListGroupConfigs", pb.ListGroupConfigsRequest())
        return [aw.group_config(x) for x in resp.configs]

    def set_group_config(
        self, queue: str, group: str = "", *, max_size: int, max_delay: Duration, grace_period: Duration
    ) -> None:
        """Override aggregation thresholds."""
        self._rpc("SetGroupConfig", aw.group_request(queue, group, max_size, max_delay, grace_period))

    def delete_group_config(self, queue: str, group: str = "") -> None:
        """Drop a group override."""
        self._rpc("DeleteGroupConfig", pb.DeleteGroupConfigRequest(queue=queue_name(queue), group=group))

    def cluster_info(self) -> list[ClusterNode]:
        """The server nodes."""
        return aw.cluster_nodes(self._rpc("ClusterInfo", pb.ClusterInfoRequest()))

    def broker_info(self) -> BrokerInfo:
        """Storage driver and metrics."""
        return aw.broker_info(self._rpc("BrokerInfo", pb.BrokerInfoRequest()))

    def server_version(self, *, timeout: float = 10.0) -> ServerVersion:
        """See :meth:`AsyncOps.server_version` (runs the handshake on a private event loop)."""
        box: list[ServerVersion | BaseException] = []

        def run() -> None:
            try:
                box.append(asyncio.run(_probe(self._caller, timeout)))
            except BaseException as exc:  # handed to the calling thread below
                box.append(exc)

        thread = threading.Thread(target=run, name="conveyor-version-probe", daemon=True)
        thread.start()
        thread.join()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def watch_events(
        self, *, queues: Iterable[str] = (), event_types: Iterable[TaskEventType | str] = ()
    ) -> Iterator[TaskEvent]:
        """Blocking form of :meth:`AsyncOps.watch_events`."""
        req = aw.watch_request(queues, event_types)
        stream = self._stub.watch_events(req, headers=self._caller.headers, timeout_ms=None)
        try:
            for msg in stream:
                yield aw.task_event(msg)
        except (ConveyorError, GeneratorExit):
            raise
        except Exception as exc:
            raise translate(exc) from exc
        finally:
            closer = getattr(stream, "close", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    closer()


async def _probe(caller: UnaryCaller, timeout: float, dialer: Dialer | None = None) -> ServerVersion:  # noqa: ASYNC109  # bounds the handshake
    from conveyor_sdk._protocol.hello import SessionConfig
    from conveyor_sdk._transport._connect import dial_tcp
    from conveyor_sdk._transport.options import DEFAULT_USER_AGENT, TLSOptions, TransportOptions
    from conveyor_sdk._transport.session import open_session

    cfg = caller.config
    with tempfile.NamedTemporaryFile("wb", suffix=".pem") as ca:
        tls = None
        if cfg.tls_ca_cert is not None:
            ca.write(cfg.tls_ca_cert)
            ca.flush()
            tls = TLSOptions(ca_file=ca.name)
        extra = tuple((k.lower(), v) for k, v in cfg.headers.items())
        options = TransportOptions(token=cfg.token, tls=tls, connect_timeout=timeout, extra_headers=extra)
        hello = SessionConfig.build(
            queues=[PROBE_QUEUE_PREFIX + secrets.token_hex(6)], concurrency=1,
            sdk_version=DEFAULT_USER_AGENT, labels={"purpose": "version-probe"},
        ).hello()  # fmt: skip
        try:
            async with asyncio.timeout(timeout):
                stream = await open_session(cfg.address, options, dialer=dialer or dial_tcp)
                try:
                    await stream.send(hello)
                    msg = await stream.recv()
                finally:
                    await stream.aclose()
        except TimeoutError:
            raise DeadlineExceeded(f"no Welcome within {timeout:g}s") from None
    if msg is None or msg.WhichOneof("frame") != "welcome":
        raise Internal("the server did not answer the version handshake with Welcome")
    welcome = msg.welcome
    return ServerVersion(server_version=welcome.server_version, min_sdk_version=welcome.min_sdk_version)
