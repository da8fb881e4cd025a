"""The Redis data types and the keyspace: strings, bitmaps, keys and expiry, hashes, lists, sets, sorted sets, geo, HyperLogLog, streams, SORT, MIGRATE, pub/sub and transactions.

Owns the commands whose semantics are Redis's own core; it imports no other wing.
"""
