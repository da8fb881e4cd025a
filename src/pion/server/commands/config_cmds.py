"""config_cmds commands (not yet written)."""
