"""geo commands (not yet written)."""
