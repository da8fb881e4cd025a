"""RediSearch's ``FT.*``: index administration, FT.SEARCH, FT.AGGREGATE, FT.HYBRID, the replies they share, and vector fields embedded from text.

The engine is ``pion.vector``; these modules parse, run it and reply.
"""
