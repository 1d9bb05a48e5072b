"""SDK checks (filled below)."""
