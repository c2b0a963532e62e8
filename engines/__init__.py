"""Engines: KV-memory managers, schedulers, the engine loop and the executors."""
