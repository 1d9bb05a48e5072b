"""AES-256-GCM keyring: upstream framing, fixed vectors, rotation, failures, key loading, no secrets."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from pathlib import Path

import pytest

from conveyor_sdk._client.seal import seal_request, seal_request_sync
from conveyor_sdk._gen.conveyor.v1 import service_pb2 as pb
from conveyor_sdk._worker.unseal import open_task
from conveyor_sdk.encryption import (
    KEY_ENV,
    KEY_FILE_ENV,
    MARKER_KEY,
    AuthenticationFailed,
    DecryptionError,
    EncryptionError,
    Encryptor,
    InvalidKey,
    Key,
    Keyring,
    MalformedCiphertext,
    NoEncryptionKeys,
    UnknownKeyId,
    load_keyring,
    parse_keys,
)
from conveyor_sdk.errors import ConveyorError
from conveyor_sdk.worker import TaskData

K1 = Key("k1", b"\x01" * 32)
Q3 = Key("2026-q3", bytes(range(32)))
GO_K2 = Key("go-k2", bytes(range(32)))

# (key, nonce, plaintext, sealed hex). Sealed by this keyring with a fixed nonce; both were also
# opened by the upstream Go encryption.AESGCM (see the PR note), which proves the framing.
VECTORS = [
    (
        K1,
        bytes(range(12)),
        b'{"user_id":42}',
        "01026b31000102030405060708090a0bc084e055458c59109a48ddf012140e561cb61ae019511e45812010def110",
    ),
    (
        Q3,
        b"\xff" * 12,
        b"hello, world",
        "0107323032362d7133ffffffffffffffffffffffff52e483a50f97feb1e42cc2b5370f40bb9bc5195169cfb0b230ad2074",
    ),
]
# Sealed by the upstream Go SDK (encryption.NewAESGCM, key id "go-k2", random nonce).
GO_SEALED = (
    "0105676f2d6b32289f381e9556b133ab80dbedbd73b16b6c444f9848c7288774173e54a27794d2bd334caa1030025de4ca"
)


@pytest.mark.parametrize(("key", "nonce", "plaintext", "sealed"), VECTORS, ids=["k1", "2026-q3"])
def test_fixed_vectors(key: Key, nonce: bytes, plaintext: bytes, sealed: str) -> None:
    """A known key and nonce give exactly the known bytes, and the bytes open again."""
    ring = Keyring(key)
    assert ring.seal_with_nonce(plaintext, nonce).hex() == sealed
    assert ring.decrypt(bytes.fromhex(sealed)) == plaintext


def test_framing_layout() -> None:
    """Version 1, key-id length, key id, 12-byte nonce, then ciphertext plus a 16-byte tag."""
    sealed = Keyring(Q3).encrypt(b"abc")
    n = len(Q3.id)
    assert sealed[0] == 1 and sealed[1] == n and sealed[2 : 2 + n] == Q3.id.encode()
    assert len(sealed) == 2 + n + 12 + 3 + 16


def test_opens_a_payload_sealed_by_the_go_sdk() -> None:
    """Ciphertext produced by the upstream Go SDK opens here."""
    assert Keyring(GO_K2).decrypt(bytes.fromhex(GO_SEALED)) == b'{"order_id":7}'


def test_round_trip_uses_fresh_nonces() -> None:
    """Each seal picks a new nonce; both open to the same plaintext."""
    ring = Keyring(K1)
    a, b = ring.encrypt(b"x" * 1000), ring.encrypt(b"x" * 1000)
    assert a != b and ring.decrypt(a) == ring.decrypt(b) == b"x" * 1000


def test_rotation_keeps_old_payloads_readable() -> None:
    """A retired key still opens what it sealed; new payloads use the active key."""
    old = Keyring(K1).encrypt(b"old")
    ring = Keyring(Q3, retired=[K1])
    assert ring.decrypt(old) == b"old"
    assert ring.encrypt(b"new")[2 : 2 + len(Q3.id)] == Q3.id.encode()
    assert ring.key_ids == ("2026-q3", "k1") and ring.active_key_id == "2026-q3"


def test_decryption_failures_are_typed() -> None:
    """Unknown key id, failed tag, truncation and a foreign version each raise their own error."""
    sealed = Keyring(K1).encrypt(b"secret")
    with pytest.raises(UnknownKeyId, match="'k1'") as unknown:
        Keyring(Q3).decrypt(sealed)
    assert unknown.value.retryable
    with pytest.raises(AuthenticationFailed) as auth:
        Keyring(Key("k1", b"\x02" * 32)).decrypt(sealed)
    assert auth.value.retryable
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(AuthenticationFailed):
        Keyring(K1).decrypt(tampered)
    relabelled = bytes([1, 2]) + b"k2" + sealed[4:]  # the header is authenticated too
    with pytest.raises(AuthenticationFailed):
        Keyring(Key("k2", K1.secret)).decrypt(relabelled)
    for short in (b"", b"\x01", sealed[:20]):
        with pytest.raises(MalformedCiphertext) as malformed:
            Keyring(K1).decrypt(short)
        assert not malformed.value.retryable
    with pytest.raises(MalformedCiphertext, match="version 2") as version:
        Keyring(K1).decrypt(b"\x02" + sealed[1:])
    assert version.value.retryable
    assert isinstance(malformed.value, DecryptionError | ConveyorError)


@pytest.mark.parametrize(
    ("id_", "secret", "match"),
    [("", b"\x00" * 32, "non-empty"), ("x" * 256, b"\x00" * 32, "255"), ("k", b"\x00" * 31, "32 bytes")],
)
def test_invalid_keys(id_: str, secret: bytes, match: str) -> None:
    """Empty or over-long ids and wrong secret lengths are refused."""
    with pytest.raises(InvalidKey, match=match):
        Key(id_, secret)


def test_duplicate_ids_are_refused() -> None:
    """Two keys with one id in a ring is a configuration mistake."""
    with pytest.raises(InvalidKey, match="duplicate"):
        Keyring(K1, retired=[Key("k1", b"\x02" * 32)])


def _text(key: Key) -> str:
    return f"{key.id}:{base64.b64encode(key.secret).decode()}"


def test_key_text_and_files(tmp_path: Path) -> None:
    """``<id>:<base64>`` entries parse; a key file's first key is active, comments and blanks skipped."""
    assert Key.parse(_text(K1)) == K1
    path = tmp_path / "keys"
    path.write_text(f"# rotated 2026-07\n{_text(Q3)}\n\n{_text(K1)}\n")
    ring = load_keyring(path, environ={})
    assert ring is not None and ring.key_ids == ("2026-q3", "k1")
    env_ring = load_keyring(environ={KEY_ENV: f"{_text(K1)},{_text(Q3)}"})
    assert env_ring is not None and env_ring.key_ids == ("k1", "2026-q3")
    file_first = load_keyring(environ={KEY_ENV: _text(K1), KEY_FILE_ENV: str(path)})
    assert file_first is not None and file_first.active_key_id == "2026-q3"
    assert load_keyring(environ={}) is None


@pytest.mark.parametrize(
    ("text", "match"),
    [("k1", "<id>:<base64-secret>"), ("k1:***", "base64"), ("k1:AAAA", "32 bytes"), ("# only", "no keys")],
)
def test_bad_key_text_names_the_entry_not_the_secret(text: str, match: str) -> None:
    """A bad entry is reported with its source and number; the secret text never appears."""
    with pytest.raises(InvalidKey, match=match) as info:
        parse_keys(text, source="$CONVEYOR_ENCRYPTION_KEY")
    assert "$CONVEYOR_ENCRYPTION_KEY" in str(info.value)
    assert "***" not in str(info.value) and "AAAA" not in str(info.value)


def test_missing_key_file_is_a_clear_error(tmp_path: Path) -> None:
    """An unreadable key file names the path."""
    with pytest.raises(InvalidKey, match="cannot read key file"):
        load_keyring(tmp_path / "nope", environ={})


def test_key_material_never_in_text(caplog: pytest.LogCaptureFixture) -> None:
    """Reprs, strs and error messages of keys and rings never contain the secret (raw or base64)."""
    secret = bytes(range(100, 132))
    key = Key("prod", secret)
    ring = Keyring(key)
    texts = [repr(key), str(key), repr(ring), str(ring)]
    with caplog.at_level(logging.DEBUG):
        for bad in (b"\x01\x04prod" + b"\x00" * 40, b"\x01\x05other" + b"\x00" * 40):
            try:
                ring.decrypt(bad)
            except DecryptionError as exc:
                texts += [str(exc), repr(exc)]
    texts += [r.getMessage() for r in caplog.records]
    forms = [secret.hex(), base64.b64encode(secret).decode(), repr(secret)[2:-1]]
    assert len(texts) == 8
    assert not [t for t in texts for f in forms if f in t]
    assert "prod" in repr(ring)


def test_keyring_is_an_encryptor() -> None:
    """The built-in ring satisfies the Encryptor protocol."""
    assert isinstance(Keyring(K1), Encryptor)


class AsyncKms:
    """A bring-your-own encryptor whose calls are coroutines (like a KMS client)."""

    def __init__(self) -> None:
        self.ring = Keyring(K1)

    async def encrypt(self, plaintext: bytes) -> bytes:
        await asyncio.sleep(0)
        return self.ring.encrypt(plaintext)

    async def decrypt(self, ciphertext: bytes) -> bytes:
        await asyncio.sleep(0)
        return self.ring.decrypt(ciphertext)


def _task(id_: str, payload: bytes, metadata: dict[str, str]) -> TaskData:
    return TaskData(id_, "q", "t", payload, "application/json", metadata, 0, 3)


def _req(payload: bytes = b'{"a":1}', **kw: object) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(type="t", payload=payload, **kw)  # type: ignore[arg-type]


def test_sealing_a_request_marks_it_and_derives_the_unique_key_over_plaintext() -> None:
    """Sealed requests carry the marker; a unique_ttl without key gets sha256(type, NUL, plaintext)."""
    req = _req()
    req.unique_ttl.FromSeconds(60)
    seal_request_sync(req, Keyring(K1))
    assert req.metadata[MARKER_KEY] == "1" and Keyring(K1).decrypt(req.payload) == b'{"a":1}'
    assert req.unique_key == hashlib.sha256(b't\x00{"a":1}').hexdigest()
    empty = _req(b"")
    seal_request_sync(empty, Keyring(K1))
    assert empty.payload == b"" and MARKER_KEY not in empty.metadata


def test_reserved_marker_is_refused_in_user_metadata() -> None:
    """A plaintext task must not carry the marker, or workers would try to open it."""
    from conveyor_sdk.client import ValidationError

    req = _req(metadata={MARKER_KEY: "1"})
    with pytest.raises(ValidationError, match="reserved"):
        seal_request_sync(req, None)


def test_async_encryptor_seals_and_opens() -> None:
    """Coroutine encryptors are awaited by the async paths and run to completion by the blocking one."""
    kms = AsyncKms()
    req = _req()
    seal_request_sync(req, kms)
    assert kms.ring.decrypt(req.payload) == b'{"a":1}'

    async def main() -> TaskData:
        again = _req()
        await seal_request(again, kms)
        task = _task("t1", again.payload, dict(again.metadata))
        return await open_task(task, kms)

    opened = asyncio.run(main())
    assert opened.payload == b'{"a":1}' and MARKER_KEY not in opened.metadata


def test_async_encryptor_in_a_blocking_call_inside_a_loop_is_refused() -> None:
    """SyncClient-style sealing with an async encryptor inside a running loop raises instead of hanging."""

    async def main() -> None:
        with pytest.raises(EncryptionError, match="async Client"):
            seal_request_sync(_req(), AsyncKms())

    asyncio.run(main())


def test_open_task_failures_name_the_task() -> None:
    """No keys, unknown key and broken custom encryptors all name the task id."""
    sealed = Keyring(K1).encrypt(b"x")
    task = _task("T-42", sealed, {MARKER_KEY: "1", "a": "b"})

    class Broken:
        def encrypt(self, plaintext: bytes) -> bytes:
            return plaintext

        def decrypt(self, ciphertext: bytes) -> bytes:
            raise RuntimeError("kms unreachable")

    async def failure(encryptor: Encryptor | None) -> DecryptionError:
        with pytest.raises(DecryptionError) as info:
            await open_task(task, encryptor)
        return info.value

    no_keys = asyncio.run(failure(None))
    unknown = asyncio.run(failure(Keyring(Q3)))
    broken = asyncio.run(failure(Broken()))
    assert isinstance(no_keys, NoEncryptionKeys) and isinstance(unknown, UnknownKeyId)
    assert all(
        e.message.startswith("task T-42: ") and e.task_id == "T-42" for e in (no_keys, unknown, broken)
    )
    assert "kms unreachable" in broken.message and broken.retryable
    plain = _task("p", b"{}", {"a": "b"})
    assert asyncio.run(open_task(plain, None)) is plain
