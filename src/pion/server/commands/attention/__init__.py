"""Stage 2: ``ATTEND.PREFIX.*``, attention computed by the server over a stored prefix (store, dense and fused queries, sparse selectors).
"""
