"""The daemon's file descriptors: the soft limit raised to the hard one at start, and a
reserve kept for its own files (databases, logs, child pipes) that connections never get.

Every connection is a descriptor; with the common soft limit of 1,024 an idle flood used
them all, and the daemon could open neither a database nor an answer.
"""

from __future__ import annotations

import logging

log = logging.getLogger("butler.daemon")

RESERVE = 128  # descriptors connections never get: the daemon's files, pipes and sockets
_UNLIMITED = 1 << 20  # the soft limit asked for when the hard one is "unlimited"


def raise_fd_limit() -> int | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one; the soft limit now in force, or
    None where there is no such limit (not POSIX)."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, _UNLIMITED)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open file limit from %d to %d: %s", soft, target, exc)
    return soft


def connection_budget(wanted: int, limit: int | None) -> int:
    """``wanted`` connections, or fewer if the descriptor limit less the reserve is less."""
    if limit is None or wanted + RESERVE <= limit:
        return wanted
    budget = max(1, limit - RESERVE)
    log.warning("server.max_connections is %d but the open file limit is %d: at most %d "
                "connections (%d descriptors kept for the daemon's own files); raise "
                "LimitNOFILE", wanted, limit, budget, RESERVE)
    return budget
