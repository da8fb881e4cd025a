"""keys commands (not yet written)."""
