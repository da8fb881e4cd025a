"""The durability wing: the journal hand-off, the write-ahead log, snapshots (BGSAVE), the
data-directory lock and status, the memory guard.

Imports the admin registries it reports into (INFO's memory reading, latency histograms) and
the server's leaves; never security, the network or the commands.
"""
