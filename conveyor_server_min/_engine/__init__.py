"""The reference server's engine: domain model, broker, dispatcher and maintenance (no I/O, no pb)."""

from conveyor_server_min._engine.broker import Broker, MemoryBroker
from conveyor_server_min._engine.clock import Clock, FakeClock, SystemClock
from conveyor_server_min._engine.engine import Engine
from conveyor_server_min._engine.model import Dependency, FailurePolicy, Outcome, RetryPolicy, State, Task

__all__ = [
    "Broker",
    "Clock",
    "Dependency",
    "Engine",
    "FailurePolicy",
    "FakeClock",
    "MemoryBroker",
    "Outcome",
    "RetryPolicy",
    "State",
    "SystemClock",
    "Task",
]
