"""The network wing: sockets, TLS, per-connection state and flow control, CLIENT LIST's fields.

Imports the core (dispatch, context) below it; nothing in it knows durability, security or
the admin registries.
"""
