"""The semantic cache and agent memory: Pion-owned search indexes over documents in the keyspace.

An engine package (beside ``pion.vector``, whose search engine it uses and never changes): index
definitions, document layouts, the one threshold rule, retrieval and fusion. It reads the
keyspace through functions the server passes in and returns what to write as plain argv
(``HSET``/``DEL``), which the server runs and logs, so replay never needs the embedding model.
Never imports the server.
"""
