"""Runtime layer: the asyncio worker, handler registry, execution context and executors."""
