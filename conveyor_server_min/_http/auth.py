"""Bearer-token authentication for every RPC (checked once at stream open for sessions)."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from conveyor_sdk.errors import Unauthenticated

__all__ = ["UNAUTHENTICATED_MESSAGE", "Authenticator"]

UNAUTHENTICATED_MESSAGE = "missing or invalid bearer token"
_PREFIX = "Bearer "


class Authenticator:
    """Accepts ``Authorization: Bearer <token>`` for any configured token; no tokens = auth off.

    The prefix is matched exactly (case-sensitive, one space) and each token is
    compared in constant time; every configured token is compared so the time
    taken does not reveal which one matched.
    """

    __slots__ = ("_tokens",)

    def __init__(self, tokens: Sequence[str] = ()) -> None:
        self._tokens = tuple(t.encode() for t in tokens if t)

    @property
    def enabled(self) -> bool:
        """Whether any token is configured."""
        return bool(self._tokens)

    def check(self, authorization: str | None) -> Unauthenticated | None:
        """None when the header is acceptable, else the error to fail the call with."""
        if not self._tokens:
            return None
        if authorization is None or not authorization.startswith(_PREFIX):
            return Unauthenticated(UNAUTHENTICATED_MESSAGE)
        given = authorization[len(_PREFIX) :].encode()
        matched = False
        for token in self._tokens:
            matched |= hmac.compare_digest(given, token)
        if not given or not matched:
            return Unauthenticated(UNAUTHENTICATED_MESSAGE)
        return None

    def __repr__(self) -> str:
        return f"Authenticator(tokens={len(self._tokens)})"
