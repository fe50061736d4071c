"""systemd's readiness protocol (``Type=notify``, sd_notify(3)): one datagram of
``KEY=value`` lines to the Unix socket named in ``NOTIFY_SOCKET``. A few lines of socket
code rather than a dependency; without the variable (not under systemd) nothing is sent."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger("butler.service")

READY = "READY=1"
STOPPING = "STOPPING=1"


def reloading() -> str:
    """What systemd (``Type=notify-reload``) expects before a reload's ``READY=1``."""
    return f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}"


def notify(message: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` to the service manager; False when there is none to tell. A socket
    that cannot be reached is logged, never raised: the daemon serves either way."""
    address = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if not address:
        return False
    # An abstract socket is written with a leading "@" and addressed with a NUL byte.
    target = "\0" + address[1:] if address.startswith("@") else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode(), target)
    except OSError as exc:
        log.warning("cannot notify the service manager at %s: %s", address, exc)
        return False
    return True
