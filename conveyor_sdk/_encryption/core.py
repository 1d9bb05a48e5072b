"""AES-256-GCM payload sealing, byte-compatible with the upstream Go, TypeScript and Python SDKs.

Framing of one sealed payload (every field is fixed by the upstream format)::

    byte 0        version = 1
    byte 1        n = length of the key id in bytes (1..255)
    bytes 2..2+n  key id (UTF-8, sent in the clear)
    next 12       GCM nonce (random per call)
    rest          ciphertext followed by the 16-byte GCM tag

The header (version, length, key id) is the GCM additional data, so a tampered
key id fails the tag. ``cryptography`` is imported only when a :class:`Keyring`
is built (the ``encryption`` extra); the framing helpers need nothing.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable
from typing import Any, ClassVar

from conveyor_sdk.errors import Code, ConveyorError

__all__ = [
    "KEY_BYTES",
    "MARKER_KEY",
    "MARKER_VALUE",
    "NONCE_BYTES",
    "TAG_BYTES",
    "VERSION",
    "AuthenticationFailed",
    "DecryptionError",
    "EncryptionError",
    "InvalidKey",
    "Key",
    "Keyring",
    "MalformedCiphertext",
    "NoEncryptionKeys",
    "UnknownKeyId",
    "decode_header",
    "encode_header",
]

VERSION = 1
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
MAX_KEY_ID_BYTES = 255
MARKER_KEY = "conveyor.encryption"
MARKER_VALUE = "1"


class EncryptionError(ConveyorError):
    """Root of the encryption errors (sealing, opening, key configuration)."""

    code: ClassVar[Code] = Code.FAILED_PRECONDITION

    def __str__(self) -> str:
        return self.message


class InvalidKey(EncryptionError, ValueError):
    """A key or keyring cannot be built: empty/long id, wrong secret length, bad text form."""

    code = Code.INVALID_ARGUMENT


class DecryptionError(EncryptionError):
    """A sealed payload cannot be opened. ``retryable`` says whether a worker retries the task."""

    default_retryable = True

    def __init__(self, message: str, *, task_id: str = "", retryable: bool | None = None) -> None:
        super().__init__(message, retryable=retryable)
        self.task_id = task_id

    def for_task(self, task_id: str) -> DecryptionError:
        """The same error, its message prefixed with ``task <id>: ``."""
        return type(self)(f"task {task_id}: {self.message}", task_id=task_id, retryable=self.retryable)


class NoEncryptionKeys(DecryptionError):
    """A task carries the encryption marker but this worker holds no keys (retried)."""


class UnknownKeyId(DecryptionError):
    """The payload names a key id the keyring does not hold (retried: keys may still roll out)."""


class AuthenticationFailed(DecryptionError):
    """The GCM tag does not verify: wrong secret under that id, or tampered/corrupt bytes (retried)."""

    code = Code.DATA_LOSS


class MalformedCiphertext(DecryptionError):
    """The bytes are not in the framing at all (truncated); never retried, they cannot change."""

    code = Code.DATA_LOSS
    default_retryable = False


def encode_header(key_id: str) -> bytes:
    """Version byte, key-id length byte, key id."""
    raw = key_id.encode()
    return bytes((VERSION, len(raw))) + raw


def decode_header(data: bytes | memoryview) -> tuple[str, int]:
    """``(key_id, header_length)``; :class:`MalformedCiphertext` when the framing is wrong."""
    if len(data) < 2:
        raise MalformedCiphertext(f"sealed payload is {len(data)} bytes, shorter than its header")
    if data[0] != VERSION:
        # A newer framing version may open on an upgraded worker: retry rather than give up.
        raise MalformedCiphertext(f"unsupported encryption framing version {data[0]}", retryable=True)
    end = 2 + data[1]
    if len(data) < end + NONCE_BYTES + TAG_BYTES:
        raise MalformedCiphertext(f"sealed payload is truncated ({len(data)} bytes)")
    try:
        return bytes(data[2:end]).decode(), end
    except UnicodeDecodeError:
        raise MalformedCiphertext("key id in the sealed payload is not UTF-8") from None


class Key:
    """A named 32-byte AES-256 secret. The id travels in the clear; the secret never prints."""

    __slots__ = ("_secret", "id")

    def __init__(self, id: str, secret: bytes) -> None:
        if not isinstance(id, str) or not id:
            raise InvalidKey("a key needs a non-empty id")
        if len(id.encode()) > MAX_KEY_ID_BYTES:
            raise InvalidKey(f"key id {id[:40]!r}... is longer than {MAX_KEY_ID_BYTES} bytes")
        if not isinstance(secret, bytes | bytearray) or len(secret) != KEY_BYTES:
            size = len(secret) if isinstance(secret, bytes | bytearray) else type(secret).__name__
            raise InvalidKey(f"key {id!r}: the secret must be {KEY_BYTES} bytes, got {size}")
        self.id = id
        self._secret = bytes(secret)

    @property
    def secret(self) -> bytes:
        """The raw key material (keep it out of logs)."""
        return self._secret

    @classmethod
    def generate(cls, id: str) -> Key:
        """A fresh random key."""
        return cls(id, os.urandom(KEY_BYTES))

    @classmethod
    def parse(cls, text: str) -> Key:
        """``<id>:<base64-secret>`` (standard base64, as upstream's ``CONVEYOR_ENCRYPTION_KEY``)."""
        key_id, sep, encoded = text.strip().partition(":")
        if not sep or not key_id or not encoded:
            raise InvalidKey('a key must be written "<id>:<base64-secret>"')
        try:
            secret = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidKey(f"key {key_id!r}: the secret is not valid base64") from None
        return cls(key_id, secret)

    def __repr__(self) -> str:
        return f"Key(id={self.id!r}, secret=<{KEY_BYTES} bytes>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other.id == self.id and other._secret == self._secret

    def __hash__(self) -> int:
        return hash(self.id)


def _aead_class() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise EncryptionError(
            "payload encryption needs the 'cryptography' package: pip install 'conveyor-py[encryption]'"
        ) from None
    return AESGCM


class Keyring:
    """The built-in :class:`~conveyor_sdk.encryption.Encryptor`: one active key, any retired ones.

    New payloads are sealed under ``active``; any key in the ring opens payloads
    sealed under its id, so rotating keys never strands stored tasks. Synchronous
    and thread-safe (the AEAD objects are immutable).
    """

    __slots__ = ("_active", "_aeads", "_invalid_tag")

    def __init__(self, active: Key, retired: Iterable[Key] = ()) -> None:
        aead = _aead_class()
        from cryptography.exceptions import InvalidTag

        self._invalid_tag = InvalidTag
        self._aeads: dict[str, Any] = {}
        for key in (active, *retired):
            if not isinstance(key, Key):
                raise InvalidKey(f"keyring entries must be Key objects, got {type(key).__name__}")
            if key.id in self._aeads:
                raise InvalidKey(f"duplicate key id {key.id!r} in the keyring")
            self._aeads[key.id] = aead(key.secret)
        self._active = active.id

    @property
    def active_key_id(self) -> str:
        """The id new payloads are sealed under."""
        return self._active

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every id this ring can open, the active one first."""
        return tuple(self._aeads)

    def encrypt(self, plaintext: bytes) -> bytes:
        """Seal under the active key with a fresh random nonce."""
        return self.seal_with_nonce(plaintext, os.urandom(NONCE_BYTES))

    def seal_with_nonce(self, plaintext: bytes, nonce: bytes) -> bytes:
        """Seal with a caller-chosen nonce: for test vectors only (a reused nonce breaks GCM)."""
        if len(nonce) != NONCE_BYTES:
            raise ValueError(f"a GCM nonce is {NONCE_BYTES} bytes, got {len(nonce)}")
        header = encode_header(self._active)
        sealed: bytes = self._aeads[self._active].encrypt(nonce, bytes(plaintext), header)
        return header + nonce + sealed

    def decrypt(self, ciphertext: bytes) -> bytes:
        """Open a payload sealed under any key of the ring (errors: see the module docstring)."""
        data = memoryview(ciphertext).toreadonly()
        key_id, end = decode_header(data)
        aead = self._aeads.get(key_id)
        if aead is None:
            raise UnknownKeyId(f"payload was sealed under key id {key_id!r}, not held by this keyring")
        nonce, body = data[end : end + NONCE_BYTES], data[end + NONCE_BYTES :]
        try:
            plaintext: bytes = aead.decrypt(nonce, body, data[:end])
        except self._invalid_tag:
            raise AuthenticationFailed(
                f"authentication failed under key id {key_id!r} (wrong secret, or the bytes were altered)"
            ) from None
        return plaintext

    def __repr__(self) -> str:
        return f"Keyring(active={self._active!r}, keys={list(self._aeads)!r})"
