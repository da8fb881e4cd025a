"""Text embeddings for the server: the ``Embedder`` component and its providers.

An engine package: it imports ``pion.protocol`` at most, never the server, and never torch or
transformers in the server process. The packaged all-MiniLM-L6-v2 and local sentence-transformers
models run in a worker subprocess (``pion.embedding.worker``, the one module here allowed to import
the model runtimes, see pyproject.toml's contracts); an OpenAI-compatible ``/v1/embeddings``
endpoint is called over HTTP; ``hash`` is a deterministic, non-semantic provider for tests.
"""
