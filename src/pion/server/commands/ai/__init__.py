"""Embeddings in the server (``AI.EMBED``), the semantic cache (``AI.SEMANTIC_CACHE``) and agent memory (``AI.MEMORY``).
"""
