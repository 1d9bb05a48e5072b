"""Test helpers.

For application code: :class:`AppRunner` (an app's real handlers against a real server),
:func:`call_task` (one handler, no server) and the ``conveyor_*`` pytest fixtures
(:mod:`conveyor_sdk.testing.plugin`). For SDK authors: a scripted HTTP/2 peer that plays a
(misbehaving) Conveyor server, and a TCP fault proxy (:class:`FaultProxy`) that breaks the link
between a client and a server on demand.
"""

from conveyor_sdk.testing._peer_session import PeerSession
from conveyor_sdk.testing.direct import CallResult, Progress, call_task, call_task_async, make_context
from conveyor_sdk.testing.faultproxy import FaultProxy, SyncFaultProxy
from conveyor_sdk.testing.peer import ScriptedPeer
from conveyor_sdk.testing.runner import AppRunner, RunResult, TaskResult, start_server

__all__ = [
    "AppRunner",
    "CallResult",
    "FaultProxy",
    "PeerSession",
    "Progress",
    "RunResult",
    "ScriptedPeer",
    "SyncFaultProxy",
    "TaskResult",
    "call_task",
    "call_task_async",
    "make_context",
    "start_server",
]
