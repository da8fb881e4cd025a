"""hyperloglog commands (not yet written)."""
