"""Server settings: one option table shared by ``conveyor server`` and ``python -m conveyor_server_min``.

Precedence: built-in defaults < ``CONVEYOR_*`` environment (upstream names) <
command-line flags. Every bad value raises :class:`ConfigError` with a
one-line message naming the flag; the command line turns it into exit code 2.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conveyor_sdk._transport import eventloop
from conveyor_sdk.durations import parse_duration
from conveyor_sdk.errors import InvalidArgument
from conveyor_server_min._http.limits import HttpLimits
from conveyor_server_min.service_api import EngineConfig

__all__ = ["OPTIONS", "ConfigError", "HttpLimits", "Option", "ServerConfig", "build_config"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_MAX_MESSAGE = 5 * 1024 * 1024  # 4 MiB protocol limit + envelope margin


class ConfigError(ValueError):
    """A setting is invalid; the message is one line and names the flag or variable."""


@dataclass(frozen=True, slots=True)
class Option:
    """One command-line option (and its upstream environment variable, if any)."""

    dest: str
    flag: str
    kind: str  # "str" | "int" | "duration" | "bool" | "multi" | "path"
    help: str
    env: str | None = None
    metavar: str = ""


_E = "CONVEYOR_ENGINE__"
OPTIONS: tuple[Option, ...] = (
    Option("host", "--host", "str", "Interface to bind (default 127.0.0.1).", metavar="HOST"),
    Option("port", "--port", "int", "Port to bind; 0 picks a free port (default 8080).", metavar="PORT"),
    Option(
        "metrics_port",
        "--metrics-port",
        "int",
        "Serve Prometheus metrics at /metrics on this port of --host (a listener of its own, no "
        "token; 0 picks a free port; default: off). Env: CONVEYOR_METRICS__LISTEN (host:port).",
        metavar="PORT",
    ),
    Option(
        "token",
        "--token",
        "multi",
        "Accepted bearer token (repeatable). Env: CONVEYOR_API__AUTH_TOKENS (comma list).",
        env="CONVEYOR_API__AUTH_TOKENS",
        metavar="TOKEN",
    ),
    Option("dev", "--dev", "bool", "Development mode: authentication off unless tokens are given."),
    Option(
        "loop", "--loop", "str", "Event loop: auto (uvloop when installed, the default), asyncio or uvloop."
    ),
    Option("lease_ttl", "--lease-ttl", "duration", "Lease length (default 60s).", _E + "LEASE_TTL"),
    Option(
        "reap_interval", "--reap-interval", "duration", "Lease reaper period (15s).", _E + "REAP_INTERVAL"
    ),
    Option(
        "promote_interval",
        "--promote-interval",
        "duration",
        "Scheduled/retry promotion period (1s).",
        _E + "PROMOTE_INTERVAL",
    ),
    Option(
        "silent_session_intervals",
        "--silent-session-intervals",
        "int",
        "Close a session that holds tasks and sends nothing for this many heartbeat intervals "
        "(lease-ttl / 3), releasing its tasks; 0 = never (default 3).",
        metavar="N",
    ),
    Option(
        "group_max_size", "--group-max-size", "int", "Group fires at this size (100).", _E + "GROUP_MAX_SIZE"
    ),
    Option(
        "group_max_delay",
        "--group-max-delay",
        "duration",
        "Group fires this long after its first member (1m).",
        _E + "GROUP_MAX_DELAY",
    ),
    Option(
        "group_grace_period",
        "--group-grace-period",
        "duration",
        "Group fires this long after its last member (10s).",
        _E + "GROUP_GRACE_PERIOD",
    ),
    Option(
        "group_sweep_interval",
        "--group-sweep-interval",
        "duration",
        "Group sweeper period (1s).",
        _E + "GROUP_SWEEP_INTERVAL",
    ),
    Option(
        "default_max_retry",
        "--default-max-retry",
        "int",
        "Retry budget when a task asks for 0 (25).",
        _E + "DEFAULT_MAX_RETRY",
    ),
    Option("idle_timeout", "--idle-timeout", "duration", "Close connections idle this long (2m)."),
    Option("header_timeout", "--header-timeout", "duration", "Time allowed for a request head (10s)."),
    Option("body_timeout", "--body-timeout", "duration", "Longest pause inside a request body (30s)."),
    Option("max_streams", "--max-streams", "int", "Concurrent HTTP/2 streams per connection (100)."),
    Option(
        "max_connections_per_client",
        "--max-connections-per-client",
        "int",
        "Open connections per client IP address (128).",
    ),
    Option(
        "tls_cert", "--tls-cert", "path", "PEM certificate chain; enables TLS with --tls-key.", metavar="FILE"
    ),
    Option("tls_key", "--tls-key", "path", "PEM private key for --tls-cert.", metavar="FILE"),
    Option(
        "db",
        "--db",
        "path",
        "Durable store: keep every task and setting in this SQLite file (created if missing); "
        "default: in memory, lost on restart. Env: CONVEYOR_DB.",
        env="CONVEYOR_DB",
        metavar="PATH",
    ),
)

_ENGINE_FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}
_HTTP_FIELDS = {f.name for f in dataclasses.fields(HttpLimits)}
_POSITIVE = {
    "lease_ttl",
    "reap_interval",
    "promote_interval",
    "group_sweep_interval",
    "idle_timeout",
    "header_timeout",
    "body_timeout",
    "max_streams",
    "max_connections_per_client",
}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything the reference server needs to run."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    tokens: tuple[str, ...] = ()
    dev: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE
    http: HttpLimits = field(default_factory=HttpLimits)  # timeouts and per-client caps
    shutdown_grace: float = 3.0  # total budget for a graceful stop (sessions end, streams drain)
    db: str | None = None  # SQLite file of the durable store; None = in-memory broker
    loop: str = "auto"  # event loop (conveyor_sdk._transport.eventloop): auto | asyncio | uvloop
    metrics_port: int | None = None  # Prometheus /metrics listener; None = off
    metrics_host: str | None = None  # None = the API's host

    @property
    def tls(self) -> bool:
        """Whether the listener speaks TLS."""
        return self.tls_cert is not None

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http`` (h2c)."""
        return "https" if self.tls else "http"


def _convert(opt: Option, raw: Any, source: str) -> Any:
    where = f"{source}: " if source else ""
    if opt.kind == "int":
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ConfigError(f"{where}{opt.flag} must be an integer, got {raw!r}") from None
        if value < 0:
            raise ConfigError(f"{where}{opt.flag} must not be negative, got {value}")
        return value
    if opt.kind == "duration":
        try:
            return parse_duration(str(raw))
        except ValueError as exc:
            raise ConfigError(f"{where}{opt.flag}: {exc}") from None
    return raw


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    listen = env.get("CONVEYOR_API__LISTEN", "").strip()
    if listen:
        host, sep, port = listen.rpartition(":")
        if not sep:
            raise ConfigError(f"CONVEYOR_API__LISTEN must be host:port or :port, got {listen!r}")
        values["host"] = host.strip("[]") or "0.0.0.0"
        port_opt = next(opt for opt in OPTIONS if opt.dest == "port")
        values["port"] = _convert(port_opt, port, "CONVEYOR_API__LISTEN")
    metrics = env.get("CONVEYOR_METRICS__LISTEN", "").strip()
    if metrics:
        host, sep, port = metrics.rpartition(":")
        if not sep:
            raise ConfigError(f"CONVEYOR_METRICS__LISTEN must be host:port or :port, got {metrics!r}")
        values["metrics_host"] = host.strip("[]") or None
        metrics_opt = next(opt for opt in OPTIONS if opt.dest == "metrics_port")
        values["metrics_port"] = _convert(metrics_opt, port, "CONVEYOR_METRICS__LISTEN")
    if env.get("CONVEYOR_API__ALLOW_UNAUTHENTICATED", "").strip().lower() in ("1", "true", "yes"):
        values["allow_unauthenticated"] = True
    for opt in OPTIONS:
        if opt.env is None or not env.get(opt.env, "").strip():
            continue
        raw = env[opt.env].strip()
        if opt.kind == "multi":
            values[opt.dest] = [t.strip() for t in raw.split(",") if t.strip()]
        else:
            values[opt.dest] = _convert(opt, raw, opt.env)
    return values


def _from_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    by_dest = {opt.dest: opt for opt in OPTIONS}
    for dest, raw in flags.items():
        opt = by_dest.get(dest)
        if opt is None or raw is None or (opt.kind == "multi" and not raw):
            continue
        if opt.kind == "bool":
            if raw:
                values[dest] = True
            continue
        values[dest] = _convert(opt, raw, "")
    return values


def build_config(flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> ServerConfig:
    """Merge defaults, environment and flags into a validated :class:`ServerConfig`."""
    values = _from_env(os.environ if env is None else env)
    values.update(_from_flags(flags))
    _validate(values)
    engine = EngineConfig(**{k: v for k, v in values.items() if k in _ENGINE_FIELDS})
    http = HttpLimits(**{k: v for k, v in values.items() if k in _HTTP_FIELDS})
    return ServerConfig(
        host=values.get("host", DEFAULT_HOST),
        port=values.get("port", DEFAULT_PORT),
        tokens=tuple(values.get("token", ())),
        dev=bool(values.get("dev", False)),
        tls_cert=values.get("tls_cert"),
        tls_key=values.get("tls_key"),
        engine=engine,
        db=values.get("db") or None,
        http=http,
        loop=values.get("loop", "auto"),
        metrics_port=values.get("metrics_port"),
        metrics_host=values.get("metrics_host"),
    )


def _validate(values: Mapping[str, Any]) -> None:
    for flag, port in (
        ("--port", values.get("port", DEFAULT_PORT)),
        ("--metrics-port", values.get("metrics_port")),
    ):
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"{flag} must be between 0 and 65535, got {port}")
    for name in _POSITIVE:
        if name in values and values[name] <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be greater than zero")
    if values.get("group_max_size", 1) < 1:
        raise ConfigError("--group-max-size must be at least 1")
    _validate_tls(values.get("tls_cert"), values.get("tls_key"))
    try:
        eventloop.resolve(values.get("loop", "auto"))
    except InvalidArgument as exc:
        raise ConfigError(f"--loop: {exc.message}") from None
    if not values.get("token") and not values.get("dev") and not values.get("allow_unauthenticated"):
        raise ConfigError(
            "refusing to start without authentication: pass --token (or set CONVEYOR_API__AUTH_TOKENS), "
            "or --dev for a development server"
        )


def _validate_tls(cert: str | None, key: str | None) -> None:
    if (cert is None) != (key is None):
        raise ConfigError("--tls-cert and --tls-key must be given together")
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        if path is not None and not os.path.isfile(path):
            raise ConfigError(f"{flag}: no such file {path!r}")


def option_names(options: Sequence[Option] = OPTIONS) -> list[str]:
    """Flag names, for help text and tests."""
    return [opt.flag for opt in options]
