"""zsets commands (not yet written)."""
