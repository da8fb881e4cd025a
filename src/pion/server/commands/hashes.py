"""hashes commands (not yet written)."""
