"""Pion: a memory engine for LLM inference on the Redis wire protocol."""

__version__ = "0.1.0"
