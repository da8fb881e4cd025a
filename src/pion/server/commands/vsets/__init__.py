"""Redis 8's vector sets: ``VADD``, ``VSIM`` and the rest, one HNSW per key.
"""
