"""Pion's search engines: RediSearch's FT.* indexes and Redis 8's vector sets.

The FT.* side: ``schema`` (FT.CREATE's definition), ``documents`` (a hash or JSON value as the
fields an index sees), ``fields`` / ``geoshape`` / ``vectors`` (the per-field indexes: text, tag,
numeric, geo, GEOSHAPE, and HNSW or FLAT vectors over usearch), ``text`` and ``chinese``
(tokenising), ``query_lexer`` / ``query_parser`` / ``query_exec`` (the query language and its
evaluation), ``aggregate``, ``hybrid``, ``search`` and ``engine`` (the per-database registry the
server's FT.* commands call). ``vset/`` holds the vector sets (VADD, VSIM, ...), with their
compiled graph kernel. An engine: it imports storage's value types, never the server.
"""
