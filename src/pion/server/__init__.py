"""The RESP server: listener, connections, dispatcher, command families, INFO.

Imports storage, protocol and the engines; nothing below imports it.
"""
