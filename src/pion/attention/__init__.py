"""attention: reserved for a later issue; empty so the layer contracts hold."""
