"""Lua scripting: ``EVAL``/``SCRIPT`` and ``FUNCTION``/``FCALL``; the engine is ``pion.server.scripting``.
"""
