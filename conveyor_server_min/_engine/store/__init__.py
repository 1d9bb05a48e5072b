"""The optional durable store: one SQLite file behind the engine's :class:`Broker` seam."""

from conveyor_server_min._engine.store.schema import MIGRATIONS, StoreError, open_database, schema_version
from conveyor_server_min._engine.store.sqlite_broker import Changes, SqliteBroker

__all__ = ["MIGRATIONS", "Changes", "SqliteBroker", "StoreError", "open_database", "schema_version"]
