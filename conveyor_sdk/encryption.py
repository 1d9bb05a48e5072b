"""End-to-end payload encryption: the server stores and relays ciphertext only.

A client seals each payload before it is enqueued; a worker opens it before the
payload codec and the handler see it. The built-in scheme (:class:`Keyring`) is
AES-256-GCM in the same framing as the upstream Go, TypeScript and Python SDKs
and CLI, so a task sealed by any of them runs on ours and the other way round.
Sealed tasks carry the metadata marker ``conveyor.encryption`` = ``1``; workers
open only marked tasks and remove the marker, so sealed and plaintext tasks can
share a queue.

Example::

    from conveyor_sdk.encryption import Key, Keyring, load_keyring

    ring = Keyring(Key.parse("2026-q3:<base64 32 bytes>"), retired=[old_key])
    client = Client(addr, encryption=ring)          # seals
    worker = Worker(addr, encryption=ring)          # opens (or App(encryption=ring))
    ring = load_keyring()                           # from CONVEYOR_ENCRYPTION_KEY(_FILE), or None

Keys from the environment (never the command line):

``CONVEYOR_ENCRYPTION_KEY``
    ``<id>:<base64-secret>``, upstream's variable; several keys may be given
    comma-separated, the first is the active one.
``CONVEYOR_ENCRYPTION_KEY_FILE``
    a key file: one ``<id>:<base64-secret>`` per line (``#`` comments and blank
    lines ignored), the first key active, the others retired (decrypt only).
    Takes precedence over ``CONVEYOR_ENCRYPTION_KEY``.

Bring your own KMS/HSM codec by implementing :class:`Encryptor` (``encrypt`` /
``decrypt`` returning bytes or awaitables). Failures a worker reports, all
naming the task id, and whether the task's retry budget is spent on them:

* :class:`NoEncryptionKeys`: marked task, worker without encryption: retried;
* :class:`UnknownKeyId`: the payload's key id is not in the worker's ring: retried;
* :class:`AuthenticationFailed`: the GCM tag fails (wrong secret under that id,
  tampering): retried;
* :class:`MalformedCiphertext`: too short for the framing or key id not UTF-8:
  **not** retried (``SKIP_RETRY``); a framing version other than 1: retried;
* any exception of a custom Encryptor: retried.

Retried failures follow upstream (a fleet mid-rollout may have a worker that
holds the key); truncated bytes can never open, so they are ``SKIP_RETRY``. A
handler never receives a sealed payload. Key material never appears in reprs,
errors or logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from conveyor_sdk._encryption.core import (
    MARKER_KEY,
    MARKER_VALUE,
    AuthenticationFailed,
    DecryptionError,
    EncryptionError,
    InvalidKey,
    Key,
    Keyring,
    MalformedCiphertext,
    NoEncryptionKeys,
    UnknownKeyId,
)
from conveyor_sdk._encryption.hooks import Encryptor

__all__ = [
    "KEY_ENV",
    "KEY_FILE_ENV",
    "MARKER_KEY",
    "MARKER_VALUE",
    "AuthenticationFailed",
    "DecryptionError",
    "EncryptionError",
    "Encryptor",
    "InvalidKey",
    "Key",
    "Keyring",
    "MalformedCiphertext",
    "NoEncryptionKeys",
    "UnknownKeyId",
    "load_keyring",
    "parse_keys",
]

KEY_ENV = "CONVEYOR_ENCRYPTION_KEY"
KEY_FILE_ENV = "CONVEYOR_ENCRYPTION_KEY_FILE"


def parse_keys(text: str, *, source: str) -> Keyring:
    """A keyring from ``<id>:<base64>`` entries (lines or commas); the first is active.

    Errors name ``source`` and the entry number, never the secret.
    """
    entries = [
        part.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
        for part in line.split(",")
        if part.strip()
    ]
    if not entries:
        raise InvalidKey(f"{source} holds no keys")
    keys = []
    for number, entry in enumerate(entries, 1):
        try:
            keys.append(Key.parse(entry))
        except InvalidKey as exc:
            raise InvalidKey(f"{source}, key {number}: {exc.message}") from None
    try:
        return Keyring(keys[0], keys[1:])
    except InvalidKey as exc:
        raise InvalidKey(f"{source}: {exc.message}") from None


def _read_key_file(path: str | os.PathLike[str]) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InvalidKey(f"cannot read key file {os.fspath(path)!r}: {reason}") from None


def load_keyring(
    key_file: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Keyring | None:
    """The keyring from ``key_file``, else the environment (see the module docstring); None if unset."""
    env = os.environ if environ is None else environ
    if key_file is not None:
        return parse_keys(_read_key_file(key_file), source=f"key file {os.fspath(key_file)!r}")
    path = env.get(KEY_FILE_ENV)
    if path:
        return parse_keys(_read_key_file(path), source=f"key file {path!r} (${KEY_FILE_ENV})")
    text = env.get(KEY_ENV)
    if text:
        return parse_keys(text, source=f"${KEY_ENV}")
    return None
