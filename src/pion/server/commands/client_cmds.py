"""client_cmds commands (not yet written)."""
