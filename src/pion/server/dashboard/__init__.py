"""The dashboard (``--dashboard-port``): one page that says what the cache holds and whether it
pays, served by the server itself, with no build step and nothing fetched from elsewhere.

Modules: ``part`` (the component: listener, routes, cron sample), ``http`` (the small HTTP/1.1
it speaks), ``sessions`` (logins against the server's users, cookies), ``readers`` (the numbers,
read where the metrics endpoint and INFO read them), ``prefixes`` (the prefix table, sorted and
paged on the server), ``history`` (the charts' ring buffer); ``static/`` holds the page (plain
HTML, JavaScript and CSS; the charts are SVG drawn by the script). docs/dashboard.md.
"""

from pion.server.dashboard.part import Dashboard, install

__all__ = ["Dashboard", "install"]
