"""Test helpers for SDK authors: a scripted HTTP/2 peer that plays a (misbehaving) Conveyor server."""

from conveyor_sdk.testing._peer_session import PeerSession
from conveyor_sdk.testing.peer import ScriptedPeer

__all__ = ["PeerSession", "ScriptedPeer"]
