"""Client internals: option validation, pb conversion, retry, transport (no public API here)."""
