"""Replication on Redis's protocol: ``REPLICAOF``, ``PSYNC``, ``REPLCONF``, ``WAIT``, ``ROLE``.
"""
