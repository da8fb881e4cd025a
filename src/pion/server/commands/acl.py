"""acl commands (not yet written)."""
