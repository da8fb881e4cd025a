"""sets commands (not yet written)."""
