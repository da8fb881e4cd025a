"""persistence commands (not yet written)."""
