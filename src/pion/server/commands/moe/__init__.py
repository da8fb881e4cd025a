"""MoE expert paging over the wire: ``MOE.EXPERT.*`` stores, serves, pins, prefetches and prunes the experts of a checkpoint.
"""
