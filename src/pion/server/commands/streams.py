"""streams commands (not yet written)."""
