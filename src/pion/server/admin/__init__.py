"""The admin wing: the registries the admin commands read and every part reports into.

INFO sections, latency histograms and events, the slow log, the config table (values, parse,
rewrite), command metadata and docs (``redis_commands.json``). It sits below the parts that
report into it and imports only the network (CONFIG REWRITE's listeners) and the core.
"""
