"""Lua scripting (EVAL, SCRIPT, FUNCTION, FCALL) as Redis 7: see docs/scripting.md."""
