"""The read-only web dashboards: the daemon's (tasks and their delegation trees, peers,
spend per caller) and the registry's (its live agents). Static files, no build step, no
asset from elsewhere; the page keeps the token in the tab's ``sessionStorage`` and sends
it as ``Authorization: Bearer`` on every data call (docs/operations.md, "Dashboard")."""

from internal.http import StaticPage

ASSETS = ("dashboard.js", "dashboard.css")
DAEMON_PAGE = StaticPage("/dashboard", "butler.dashboard", "daemon.html", ASSETS)
REGISTRY_PAGE = StaticPage("/dashboard", "butler.dashboard", "registry.html", ASSETS)

__all__ = ["DAEMON_PAGE", "REGISTRY_PAGE"]
