"""The keepalive rules in virtual time (sans-I/O: no sockets, no clock) and the core's PING frames."""

from __future__ import annotations

import ast
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest

from conveyor_sdk._transport._connect import tcp_keepalive
from conveyor_sdk._transport.core import SessionCore
from conveyor_sdk._transport.keepalive import Keepalive, KeepaliveOptions, LinkDead, PingNow

OPTS = KeepaliveOptions(interval=5.0, timeout=10.0)


def test_module_is_sans_io() -> None:
    """keepalive.py imports no asyncio, sockets or clock: the caller passes the time."""
    tree = ast.parse((Path(__file__).parents[2] / "conveyor_sdk/_transport/keepalive.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not names & {"asyncio", "socket", "time", "selectors", "threading"}


def test_first_ping_one_interval_after_start() -> None:
    """Nothing before ``interval``; at it, a PING with an 8-byte payload."""
    ka = Keepalive(OPTS, now=100.0)
    assert ka.next_deadline() == 105.0
    assert ka.poll(104.9) is None
    action = ka.poll(105.0)
    assert isinstance(action, PingNow) and len(action.payload) == 8
    assert ka.next_deadline() == 115.0  # now waiting for the answer


def test_answered_pings_repeat_every_interval() -> None:
    """An answer moves the next PING to ``interval`` after it; the RTT is recorded."""
    ka = Keepalive(OPTS, now=0.0)
    for start in (5.0, 10.5, 16.0):
        ping = ka.poll(start)
        assert isinstance(ping, PingNow)
        assert ka.acked(ping.payload, start + 0.5)
        assert ka.rtt == pytest.approx(0.5)
        assert ka.next_deadline() == start + 5.5
    assert ka.pings == 3


def test_unanswered_ping_is_a_dead_link_after_timeout() -> None:
    """A PING unanswered for ``timeout`` ends the connection (interval + timeout after the last answer)."""
    ka = Keepalive(OPTS, now=0.0)
    assert isinstance(ka.poll(5.0), PingNow)
    assert ka.poll(14.99) is None
    dead = ka.poll(15.0)
    assert isinstance(dead, LinkDead) and "PING" in dead.reason and "10s" in dead.reason


def test_other_traffic_does_not_stand_in_for_the_answer() -> None:
    """Only the answer to our own PING counts: a stale or foreign payload changes nothing."""
    ka = Keepalive(OPTS, now=0.0)
    ping = ka.poll(5.0)
    assert isinstance(ping, PingNow)
    assert not ka.acked(b"\x00" * 8, 6.0)
    assert not ka.acked(b"", 6.0)
    assert isinstance(ka.poll(15.0), LinkDead)


def test_stalled_write_is_a_dead_link() -> None:
    """Pending bytes that do not move for ``timeout`` end the connection, even with PINGs answered."""
    ka = Keepalive(OPTS, now=0.0)
    assert ka.poll(1.0, progress=("window", 10)) is None
    assert ka.next_deadline() == 5.0  # the next PING comes first
    ping = ka.poll(5.0, progress=("window", 10))
    assert isinstance(ping, PingNow)
    assert ka.acked(ping.payload, 5.1)
    assert ka.next_deadline() == pytest.approx(10.1)
    ping = ka.poll(10.1, progress=("window", 10))
    assert isinstance(ping, PingNow)
    assert ka.acked(ping.payload, 10.2)
    assert ka.next_deadline() == 11.0  # 1.0 + timeout: the stall's own deadline
    dead = ka.poll(11.0, progress=("window", 10))
    assert isinstance(dead, LinkDead) and "no progress" in dead.reason


def test_moving_write_is_not_a_stall() -> None:
    """A slow write that keeps moving, or ends, never counts as stalled."""
    ka = Keepalive(KeepaliveOptions(interval=100.0, timeout=10.0), now=0.0)
    for t in range(0, 60, 9):
        assert ka.poll(float(t), progress=("socket", t)) is None
    assert ka.poll(70.0) is None  # drained: nothing pending
    assert ka.poll(75.0, progress=("socket", 60)) is None  # pending again: a fresh start
    assert ka.poll(84.0, progress=("socket", 60)) is None
    assert isinstance(ka.poll(85.0, progress=("socket", 60)), LinkDead)


def test_ping_on_reuse_only_after_idle() -> None:
    """A pooled connection gets a PING with its next request only when unused for ``interval``."""
    ka = Keepalive(OPTS, now=0.0)
    assert ka.ping_due_on_reuse(4.0) is None
    ping = ka.ping_due_on_reuse(5.0)
    assert isinstance(ping, PingNow)
    assert ka.ping_due_on_reuse(30.0) is None  # one outstanding at a time
    assert isinstance(ka.poll(15.0), LinkDead)


@pytest.mark.parametrize(("interval", "timeout"), [(0, 10), (5, -1), (float("nan"), 1), (1, float("inf"))])
def test_options_must_be_positive(interval: float, timeout: float) -> None:
    """A zero, negative or non-finite interval or timeout is a ValueError naming it."""
    with pytest.raises(ValueError, match="keepalive"):
        KeepaliveOptions(interval, timeout)


def test_tcp_settings_are_looser_than_the_ping() -> None:
    """TCP keepalive and TCP_USER_TIMEOUT derive from the PING's and fire after it (15 s, 5 s x 3, 30 s)."""
    assert tcp_keepalive(None) == {"idle": 15, "interval": 5, "count": 3, "user_timeout_ms": 30000}
    fast = tcp_keepalive(KeepaliveOptions(0.2, 0.3))
    assert fast["idle"] >= 1 and fast["interval"] >= 1
    assert fast["user_timeout_ms"] / 1000 > 0.2 + 0.3


def _server() -> h2.connection.H2Connection:
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    return server


def test_core_sends_ping_and_reports_its_ack() -> None:
    """SessionCore queues a PING frame and hands the peer's acknowledgement to on_ping_ack."""
    core = SessionCore()
    core.start([(":method", "POST"), (":scheme", "http"), (":path", "/x"), (":authority", "a")])
    server = _server()
    server.receive_data(core.data_to_send())
    core.receive_data(server.data_to_send())
    acks: list[bytes] = []
    core.on_ping_ack = acks.append
    core.send_ping(b"12345678")
    events = server.receive_data(core.data_to_send())
    assert any(isinstance(e, h2.events.PingReceived) and e.ping_data == b"12345678" for e in events)
    core.receive_data(server.data_to_send())  # h2 answers PINGs by itself
    assert acks == [b"12345678"]
    assert not core.finished


def test_core_abandon_is_terminal() -> None:
    """abandon() ends the stream with the given error and blocks further sends."""
    from conveyor_sdk.errors import Unavailable

    core = SessionCore()
    core.start([(":method", "POST"), (":scheme", "http"), (":path", "/x"), (":authority", "a")])
    core.abandon(Unavailable("dead"))
    assert core.finished and core.connection_closed
    blocker = core.send_blocker()
    assert isinstance(blocker, Unavailable) and blocker.message == "dead"
