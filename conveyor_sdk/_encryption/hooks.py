"""The encryptor's shape, shared by the client (seals) and the worker (opens).

An :class:`Encryptor` may be synchronous or return awaitables (a KMS call). The
sealing side lives with the client (:mod:`conveyor_sdk._client.seal`), the opening
side with the worker (:mod:`conveyor_sdk._worker.unseal`), so this module imports
neither (CONTRIBUTING.md, "Layers").
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol, runtime_checkable

__all__ = ["Encryptor", "check_encryptor"]


@runtime_checkable
class Encryptor(Protocol):
    """Seals and opens payload bytes; each method may return the bytes or an awaitable of them.

    ``decrypt`` must open anything a previous ``encrypt`` produced, including
    payloads sealed under keys that have since been retired.
    """

    def encrypt(self, plaintext: bytes, /) -> bytes | Awaitable[bytes]:
        """Seal ``plaintext``."""
        ...

    def decrypt(self, ciphertext: bytes, /) -> bytes | Awaitable[bytes]:
        """Open ``ciphertext``."""
        ...


def check_encryptor(value: Any) -> Encryptor | None:
    """``value`` when it is None or has ``encrypt``/``decrypt``; TypeError otherwise."""
    if value is not None and not isinstance(value, Encryptor):
        raise TypeError(f"encryption must provide encrypt() and decrypt(), got {type(value).__name__}")
    return value
