"""Hello construction and local validation (refuse a bad config before any connection).

The server would reject a malformed Hello with ``invalid_argument`` (a fatal error),
so the worker validates the same rules locally and raises :class:`InvalidArgument`
with a clear message before it ever dials: no connection, no reconnect loop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk.errors import InvalidArgument

__all__ = ["QUEUE_NAME_RE", "SessionConfig"]

QUEUE_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9-_.]*$")
_INT32_MAX = 2**31 - 1


def _check_queues(queues: Mapping[str, int]) -> None:
    if not queues:
        raise InvalidArgument("a worker must serve at least one queue")
    for name, weight in queues.items():
        if not isinstance(name, str) or not QUEUE_NAME_RE.match(name):
            raise InvalidArgument(f"invalid queue name {name!r}: must match {QUEUE_NAME_RE.pattern}")
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise InvalidArgument(f"queue {name!r} weight must be an integer, got {weight!r}")
        if not 0 < weight <= _INT32_MAX:
            raise InvalidArgument(f"queue {name!r} weight must be positive, got {weight}")


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """What the worker declares in Hello; validated on construction."""

    queues: Mapping[str, int]
    concurrency: int
    sdk_version: str
    labels: Mapping[str, str] = field(default_factory=dict)
    min_server_version: str = ""
    batch_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_queues(self.queues)
        c = self.concurrency
        if isinstance(c, bool) or not isinstance(c, int) or not 0 < c <= _INT32_MAX:
            raise InvalidArgument(f"concurrency must be a positive integer, got {c!r}")
        for key, value in self.labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidArgument(f"labels must map str to str, got {key!r}: {value!r}")

    @classmethod
    def build(
        cls,
        *,
        queues: Mapping[str, int] | Iterable[str],
        concurrency: int,
        sdk_version: str,
        labels: Mapping[str, str] | None = None,
        min_server_version: str = "",
        batch_types: Iterable[str] = (),
    ) -> SessionConfig:
        """Normalise (a plain list of queue names gets weight 1) and validate."""
        qmap = dict(queues) if isinstance(queues, Mapping) else dict.fromkeys(queues, 1)
        return cls(
            queues=qmap,
            concurrency=concurrency,
            sdk_version=sdk_version,
            labels=dict(labels or {}),
            min_server_version=min_server_version,
            batch_types=tuple(sorted(set(batch_types))),
        )

    def hello(self) -> pb.WorkerMessage:
        """The first frame of every session."""
        msg = pb.WorkerMessage()
        h = msg.hello
        h.queues.update(self.queues)
        h.concurrency = self.concurrency
        h.labels.update(self.labels)
        h.sdk_version = self.sdk_version
        h.min_server_version = self.min_server_version
        h.batch_types.extend(self.batch_types)
        return msg
