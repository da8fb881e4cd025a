"""Keyspace, value types, expiry, and (later) the log, snapshots, arenas and recovery.

Imports only ``pion.protocol``. Upper layers subscribe to changes through hooks on ``Database``.
"""
