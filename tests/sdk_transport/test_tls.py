"""TLS sessions: CA verification, hostname checks, ALPN h2, client certificates, handshake timeout."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
from pathlib import Path

import pytest

from conveyor_sdk._transport import TLSOptions, TransportOptions, open_session
from conveyor_sdk.errors import InvalidArgument, Unavailable
from conveyor_sdk.testing import ScriptedPeer

from ._helpers import HELLO, WELCOME, Certs, make_certs

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A throw-away CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    return make_certs(tmp_path_factory.mktemp("certs"))


def _server_ctx(certs: Certs, *, alpn: bool = True, require_client_cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs.server_cert, certs.server_key)
    if alpn:
        ctx.set_alpn_protocols(["h2"])
    if require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(certs.ca)
    return ctx


async def _roundtrip(peer: ScriptedPeer, tls: TLSOptions) -> None:
    stream = await open_session(peer.url, TransportOptions(tls=tls))
    async with stream:
        await stream.send(HELLO)
        sess = await peer.accept()
        assert sess.headers[":scheme"] == "https"
        assert await sess.recv() == HELLO
        await sess.send(WELCOME)
        assert await stream.recv() == WELCOME
        await sess.end()
        assert await stream.recv() is None


def test_tls_with_ca_bundle(certs: Certs) -> None:
    """A session over TLS verified against the given CA bundle works end to end."""

    async def main() -> None:
        async with ScriptedPeer(ssl=_server_ctx(certs)) as peer:
            assert peer.url.startswith("https://")
            await _roundtrip(peer, TLSOptions(ca_file=str(certs.ca)))

    asyncio.run(main())


def test_untrusted_certificate_is_clear_error(certs: Certs) -> None:
    """Without the CA, verification fails with an Unavailable that says so."""

    async def main() -> None:
        async with ScriptedPeer(ssl=_server_ctx(certs)) as peer:
            with pytest.raises(Unavailable, match="certificate verification failed") as info:
                await open_session(peer.url, TransportOptions())
            assert info.value.retryable is False

    asyncio.run(main())


def test_hostname_mismatch_is_rejected(certs: Certs) -> None:
    """A certificate not valid for server_hostname is rejected."""

    async def main() -> None:
        async with ScriptedPeer(ssl=_server_ctx(certs)) as peer:
            tls = TLSOptions(ca_file=str(certs.ca), server_hostname="other.example")
            with pytest.raises(Unavailable, match="certificate verification failed"):
                await open_session(peer.url, TransportOptions(tls=tls))

    asyncio.run(main())


def test_server_without_alpn_h2(certs: Certs) -> None:
    """A TLS server that does not select ALPN h2 is refused with a clear message."""

    async def main() -> None:
        async with ScriptedPeer(ssl=_server_ctx(certs, alpn=False)) as peer:
            with pytest.raises(Unavailable, match="ALPN"):
                await open_session(peer.url, TransportOptions(tls=TLSOptions(ca_file=str(certs.ca))))

    asyncio.run(main())


def test_client_certificate(certs: Certs) -> None:
    """Mutual TLS works with cert_file/key_file and fails as Unavailable without them."""

    async def main() -> None:
        async with ScriptedPeer(ssl=_server_ctx(certs, require_client_cert=True)) as peer:
            tls = TLSOptions(
                ca_file=str(certs.ca), cert_file=str(certs.client_cert), key_file=str(certs.client_key)
            )
            await _roundtrip(peer, tls)
            with pytest.raises(Unavailable):  # TLS 1.3 may report the rejection only on first read
                stream = await open_session(peer.url, TransportOptions(tls=TLSOptions(ca_file=str(certs.ca))))
                async with stream:
                    await stream.send(HELLO)
                    await stream.recv()

    asyncio.run(main())


def test_unreadable_tls_files_are_invalid_argument(tmp_path: Path) -> None:
    """A missing CA or certificate file is a configuration error (InvalidArgument), not a connect error."""

    async def main() -> None:
        missing = str(tmp_path / "missing.pem")
        for tls in (TLSOptions(ca_file=missing), TLSOptions(cert_file=missing)):
            with pytest.raises(InvalidArgument, match="cannot load TLS files"):
                await open_session("https://127.0.0.1:1", TransportOptions(tls=tls))

    asyncio.run(main())


def test_handshake_timeout() -> None:
    """A server that accepts TCP but never answers the TLS handshake hits connect_timeout."""

    async def main() -> None:
        with socket.socket() as listener:  # the kernel completes TCP; nobody ever accepts or speaks TLS
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            port = listener.getsockname()[1]
            with pytest.raises(Unavailable, match="timed out"):
                await open_session(f"https://127.0.0.1:{port}", TransportOptions(connect_timeout=0.3))

    asyncio.run(main())
