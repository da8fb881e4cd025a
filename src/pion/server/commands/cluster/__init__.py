"""Redis Cluster's protocol on a Pion node: ``CLUSTER *``, ``ASKING``, ``READONLY``.
"""
