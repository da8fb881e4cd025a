"""pubsub commands (not yet written)."""
