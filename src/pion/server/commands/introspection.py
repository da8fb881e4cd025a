"""introspection commands (not yet written)."""
