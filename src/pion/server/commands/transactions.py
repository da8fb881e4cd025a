"""transactions commands (not yet written)."""
