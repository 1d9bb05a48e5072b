"""Client-side validation mirrors the server: what we refuse, the server refuses; what we pass, it accepts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conveyor_sdk._client.options import ValidationError, build_request
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._gen.conveyor.v1 import task_pb2 as tpb
from conveyor_sdk.client import SyncClient
from conveyor_sdk.codecs import CodecRegistry
from conveyor_sdk.errors import InvalidArgument

CODECS = CodecRegistry.default()
LATER = datetime.now(UTC) + timedelta(hours=1)


def _raw(**fields: Any) -> pb.EnqueueRequest:
    req = pb.EnqueueRequest(type=fields.pop("type", "t"))
    for name, value in fields.items():
        if isinstance(value, timedelta):
            getattr(req, name).FromTimedelta(value)
        elif isinstance(value, datetime):
            getattr(req, name).FromDatetime(value)
        elif name == "depends_on":
            req.depends_on.extend(tpb.TaskDependency(task_id=i) for i in value)
        else:
            setattr(req, name, value)
    return req


# (options for our builder, the same request built raw for the server)
CASES = [
    ({"priority": 10}, _raw(priority=10)),
    ({"priority": -1}, _raw(priority=-1)),
    ({"max_retry": -1}, _raw(max_retry=-1)),
    ({"queue": "-x"}, _raw(queue="-x")),
    ({"queue": "a b"}, _raw(queue="a b")),
    ({"process_at": LATER, "process_in": 5}, _raw(process_at=LATER, process_in=timedelta(seconds=5))),
    ({"expires_at": LATER, "expires_in": 5}, _raw(expires_at=LATER, expires_in=timedelta(seconds=5))),
    ({"group": "g", "process_in": 5}, _raw(group="g", process_in=timedelta(seconds=5))),
    ({"group": "g", "concurrency_key": "k"}, _raw(group="g", concurrency_key="k")),
    ({"depends_on": [""]}, _raw(depends_on=[""])),
    ({"depends_on": [f"d{i}" for i in range(1001)]}, _raw(depends_on=[f"d{i}" for i in range(1001)])),
]


@pytest.mark.parametrize(("options", "raw"), CASES, ids=[str(sorted(o)) for o, _ in CASES])
def test_refused_locally_and_by_the_server(url: str, options: dict[str, Any], raw: pb.EnqueueRequest) -> None:
    """Each local ValidationError corresponds to a server invalid_argument for the same request."""
    with pytest.raises(ValidationError):
        build_request("t", None, options, CODECS)
    with SyncClient(url) as client, pytest.raises(InvalidArgument):
        client._caller.call("Enqueue", client._tasks.enqueue, raw)  # bypass local validation on purpose


def test_type_and_payload_limits_match_the_server(url: str) -> None:
    """Empty type and a 1 MiB + 1 payload are refused on both sides."""
    with SyncClient(url) as client:
        for raw in (pb.EnqueueRequest(type=""), pb.EnqueueRequest(type="t", payload=b"x" * ((1 << 20) + 1))):
            with pytest.raises(InvalidArgument):
                client._caller.call("Enqueue", client._tasks.enqueue, raw)


OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "queue": st.sampled_from(["default", "q.1", "Q_2-x", "0abc"]),
        "priority": st.integers(0, 9),
        "max_retry": st.integers(0, 30),
        "process_in": st.floats(0, 3600),
        "expires_in": st.floats(1, 3600),
        "timeout": st.floats(0.001, 60),
        "retention": st.integers(0, 86400),
        "unique_ttl": st.integers(1, 600),
        "group": st.sampled_from(["g1", "g2"]),
        "concurrency_key": st.sampled_from(["k1", "k2"]),
        "metadata": st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=3),
        "depends_on": st.lists(st.sampled_from(["p1", "p2", "p3"]), max_size=3),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(options=OPTIONS, payload=st.none() | st.integers() | st.text(max_size=20))
def test_what_we_accept_the_server_accepts(url: str, options: dict[str, Any], payload: Any) -> None:
    """Any option mix that passes local validation is committed by the server (no invalid_argument)."""
    try:
        build_request("t", payload, options, CODECS)
    except ValidationError:
        return  # e.g. group with process_in: refused locally, covered by the parity cases above
    with SyncClient(url) as client:
        info = client.enqueue("t", payload, **options)
    assert info.type == "t" and info.priority == (options.get("priority") or 4)
