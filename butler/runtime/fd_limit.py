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


# A connection through the gRPC front: the client's socket, the front's to gRPC's unix
# socket, and gRPC's end of that one (internal/http/_tcp_front.py).
GRPC_DESCRIPTORS = 3


def connection_budget(wanted: int, limit: int | None, *, grpc: bool = False) -> int:
    """``wanted`` connections per port, or fewer if the descriptor limit less the reserve
    is less. Each port has a pool of that size: the HTTP port's cost one descriptor each,
    with ``grpc`` the gRPC port's cost ``GRPC_DESCRIPTORS`` more (the metrics port's few
    come out of the reserve)."""
    each = 1 + (GRPC_DESCRIPTORS if grpc else 0)
    if limit is None or wanted * each + RESERVE <= limit:
        return wanted
    budget = max(1, (limit - RESERVE) // each)
    log.warning("server.max_connections is %d but the open file limit is %d: at most %d "
                "connections per port (%d descriptors each%s, %d kept for the daemon's own "
                "files); raise LimitNOFILE", wanted, limit, budget, each,
                " with the gRPC port's" if grpc else "", RESERVE)
    return budget
