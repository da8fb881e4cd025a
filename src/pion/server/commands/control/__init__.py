"""The server's own commands: the connection (HELLO, AUTH, SELECT...), CLIENT and client tracking, CONFIG, INFO/COMMAND/SLOWLOG/LATENCY, SAVE/BGSAVE, DEBUG and ACL.

Owns what a client asks of the server rather than of the data.
"""
