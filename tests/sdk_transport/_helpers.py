"""Shared bits for the transport tests."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._transport import SessionStream, TransportOptions, open_session
from conveyor_sdk.testing import PeerSession, ScriptedPeer

HELLO = pb.WorkerMessage(hello=pb.Hello(concurrency=2, queues={"default": 1}, sdk_version="test"))
WELCOME = pb.ServerMessage(welcome=pb.Welcome(session_id="s-1"))


async def opened(peer: ScriptedPeer, **options: object) -> tuple[SessionStream, PeerSession]:
    """Open a session to ``peer``, send Hello, and return both ends (Hello already read by the peer)."""
    protocol = "grpc" if peer.protocol == "auto" else peer.protocol
    opts = TransportOptions(protocol=protocol, **options)  # type: ignore[arg-type]
    stream = await open_session(peer.url, opts)
    await stream.send(HELLO)
    sess = await peer.accept()
    assert await sess.recv() == HELLO
    return stream, sess


EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Certs:
    """Paths of a throw-away PKI made by :func:`make_certs`."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=60)


def _issue(d: Path, name: str, ext: str) -> None:
    _openssl("req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d,
    )  # fmt: skip


def make_certs(d: Path) -> Certs:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, via the openssl CLI."""
    ca_args = ("-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca")
    _openssl("req", "-x509", *EC, *ca_args, cwd=d)
    _issue(d, "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _issue(d, "client", "extendedKeyUsage=clientAuth\n")
    return Certs(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")
