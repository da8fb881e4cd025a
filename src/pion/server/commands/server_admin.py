"""server_admin commands (not yet written)."""
