"""Conveyor for Python: clients, typed task definitions, and workers for the conveyor.v1 protocol.

The common names are importable from here; they are loaded lazily so that, for
example, a worker's child process does not pay for the client's HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from conveyor_sdk._version import __version__
from conveyor_sdk.errors import Code, ConveyorError

if TYPE_CHECKING:
    from conveyor_sdk.app import App, TaskDefinition
    from conveyor_sdk.client import Client, SyncClient, task
    from conveyor_sdk.codecs import CodecRegistry
    from conveyor_sdk.types import Dependency, OnFailure, RetryPolicy, RetryStrategy, TaskInfo, TaskState
    from conveyor_sdk.worker import (
        CancelReason,
        Middleware,
        Registry,
        SkipRetry,
        Task,
        TaskContext,
        Worker,
    )

_LAZY = {
    "App": "conveyor_sdk.app",
    "TaskDefinition": "conveyor_sdk.app",
    "Client": "conveyor_sdk.client",
    "SyncClient": "conveyor_sdk.client",
    "task": "conveyor_sdk.client",
    "CodecRegistry": "conveyor_sdk.codecs",
    "Dependency": "conveyor_sdk.types",
    "OnFailure": "conveyor_sdk.types",
    "RetryPolicy": "conveyor_sdk.types",
    "RetryStrategy": "conveyor_sdk.types",
    "TaskInfo": "conveyor_sdk.types",
    "TaskState": "conveyor_sdk.types",
    "CancelReason": "conveyor_sdk.worker",
    "Middleware": "conveyor_sdk.worker",
    "Registry": "conveyor_sdk.worker",
    "SkipRetry": "conveyor_sdk.worker",
    "Task": "conveyor_sdk.worker",
    "TaskContext": "conveyor_sdk.worker",
    "Worker": "conveyor_sdk.worker",
}

__all__ = [
    "App",
    "CancelReason",
    "Client",
    "Code",
    "CodecRegistry",
    "ConveyorError",
    "Dependency",
    "Middleware",
    "OnFailure",
    "Registry",
    "RetryPolicy",
    "RetryStrategy",
    "SkipRetry",
    "SyncClient",
    "Task",
    "TaskContext",
    "TaskDefinition",
    "TaskInfo",
    "TaskState",
    "Worker",
    "__version__",
    "task",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'conveyor_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
