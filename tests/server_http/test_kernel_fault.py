"""The reference server: a failure inside the HTTP/2 kernel's fast request read is logged as ours and the
connection is closed with GOAWAY(INTERNAL_ERROR); the process takes the public path from then on."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest

from conveyor_sdk._h2kernel import probe, server
from conveyor_server_min._http.h2conn import H2Connection
from tests._h2paths import FAST_ONLY
from tests.server_http.fakes import RecordingTransport
from tests.server_http.test_h2conn import _Answering, _request

pytestmark = FAST_ONLY


def test_a_fast_read_failure_is_our_internal_error_and_a_goaway(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def renamed(*args: Any) -> Any:
        raise AttributeError("'H2Stream' object has no attribute '_inbound_window_manager'")

    monkeypatch.setattr(probe, "fast", True)
    monkeypatch.setattr(probe, "_warned", False)

    async def main() -> list[Any]:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        transport = RecordingTransport()
        conn = H2Connection(transport, _Answering(), "peer")  # type: ignore[arg-type]
        conn.start(client.data_to_send())
        client.receive_data(bytes(transport.written))
        transport.written.clear()
        _request(client)  # h2 opens the connection (IDLE until a first stream): not the fast path
        conn.data_received(client.data_to_send())
        client.receive_data(bytes(transport.written))
        transport.written.clear()
        monkeypatch.setattr(server, "_headers", renamed)
        _request(client)
        conn.data_received(client.data_to_send())
        return client.receive_data(bytes(transport.written))

    with caplog.at_level(logging.ERROR, logger="conveyor.server.http"):
        events = asyncio.run(main())
    goaway = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
    assert goaway and goaway[0].error_code == h2.errors.ErrorCodes.INTERNAL_ERROR
    assert not probe.fast
    logged = [r.getMessage() for r in caplog.records if r.name == "conveyor.server.http"]
    assert any("HTTP/2 layer (fast path; h2 4." in m and "not the server's" in m for m in logged), logged
