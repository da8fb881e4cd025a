"""Pion's K/V engine over the wire: ``V.*`` row stores, fetches and exports, ``KV.PREFIX.*`` (manifests, staged all-or-nothing stores, artifacts, migration) and the substrates (``SSM.PREFIX.*``, ``STATE.*``).
"""
