"""Lua scripting as Redis 7 (EVAL, SCRIPT, FUNCTION, FCALL); see docs/scripting.md.

engine: the per-server engine (Lua states, script cache, libraries, persistence wiring);
runtime + prelude + bridge: one sandboxed Lua 5.1 state and its ``redis.*`` API; convert: reply <->
Lua rules; busy: the script's greenlet on the loop thread, -BUSY and SCRIPT/FUNCTION KILL; functions: libraries and the
FUNCTION DUMP payload; libs, msgpack_lib, cjson_lua: bit, struct, cmsgpack, cjson.
"""
