"""scripting commands (not yet written)."""
