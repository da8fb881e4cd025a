"""The security wing: start-up checks, AUTH and HELLO, ACL users and rules, tenants.

Sits above durability (a tenant's quota reads the persistence part) and the network (TLS, the
client fields auth redacts); the commands are above it.
"""
