"""kvcache commands (not yet written)."""
