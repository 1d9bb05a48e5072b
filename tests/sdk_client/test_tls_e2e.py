"""https:// clients against the reference server with TLS: CA pinning, ALPN h2, and untrusted certificates."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor_sdk.client import Client, RetryConfig, SyncClient
from conveyor_sdk.errors import Unavailable
from conveyor_sdk.types import TaskState
from conveyor_server_min.testing import ServerProcess
from tests.sdk_transport._helpers import make_certs

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def test_tls_clients(tmp_path: Path, server_factory: Callable[..., ServerProcess]) -> None:
    """Connect and gRPC over TLS work with our CA; without it the call is Unavailable (not trusted)."""
    certs = make_certs(tmp_path)
    args = ["--dev", "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    server = server_factory(args)
    assert server.url.startswith("https://")
    ca = certs.ca.read_bytes()

    async def main() -> None:
        for protocol in ("connect", "grpc"):
            async with Client(server.url, tls_ca_cert=ca, protocol=protocol) as client:  # type: ignore[arg-type]
                info = await client.enqueue("tls", {"secure": True})
                assert (await client.get_task(info.id)).state is TaskState.PENDING

    asyncio.run(main())
    with SyncClient(server.url, tls_ca_cert=ca) as sync:
        assert sync.enqueue("tls").state is TaskState.PENDING
    no_retry = RetryConfig(attempts=1)
    with SyncClient(server.url, retry=no_retry) as untrusted, pytest.raises(Unavailable):
        untrusted.get_task("x")
