"""Conveyor for Python: clients, typed task definitions, and workers for the conveyor.v1 protocol."""

from conveyor_sdk.errors import Code, ConveyorError

__version__ = "0.1.0"

__all__ = ["Code", "ConveyorError", "__version__"]
