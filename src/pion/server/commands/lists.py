"""lists commands (not yet written)."""
