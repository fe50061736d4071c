"""Child processes that die with the daemon, ``kill -9`` included.

On Linux a child asks the kernel for ``SIGKILL`` when its parent dies
(``PR_SET_PDEATHSIG``, set between fork and exec, kept across exec): whatever ends the
daemon, the child ends too. The parent is the thread that started the child, so a child
is started from a thread that lives at least as long as it (the event loop, or the
worker thread waiting on it). Elsewhere children run on until their own end; the daemon
ends them on any orderly stop, and a command skill's group is ended by the next start
(``RunLedger.end_leftovers``).

``die_with_parent`` is for spawners that take a ``preexec_fn`` (``subprocess``,
``asyncio``); ``dying_with_parent`` wraps an argv for those that do not (the MCP SDK's
``stdio_client``): a tiny interpreter sets the signal and execs the command, which keeps
its pid.

``watch_children_from_the_loop``: the daemon learns that a child ended from the event
loop itself, not from a thread per running child.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1  # linux/prctl.h

# Loaded here, not in the child: between fork and exec a threaded process's child must
# not dlopen (it could wait forever on a lock another thread held at the fork).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None

# argv[1]: the daemon's pid. A daemon that died before the signal was set has left the
# child to another parent already: it ends at once rather than run orphaned.
_SHIM = ("import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 9)\n"
         "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
         "os.execvp(sys.argv[2], sys.argv[2:])")


def die_with_parent() -> None:
    """A ``preexec_fn``: in the child, before exec."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


def dying_with_parent(argv: Sequence[str]) -> list[str]:
    """``argv`` started so that it dies with this process (as is, off Linux)."""
    if _PRCTL is None:
        return list(argv)
    return [sys.executable, "-I", "-S", "-c", _SHIM, str(os.getpid()), *argv]


def watch_children_from_the_loop() -> None:
    """Before the daemon's event loop starts: asyncio learns that a child ended from a
    pidfd the loop polls with its sockets, not from a thread per running child blocked in
    ``waitpid`` (Python 3.11's default, ``ThreadedChildWatcher``). A caller running its
    share of command tasks started that many threads, one per spawn; and once they ended,
    their stacks and malloc arenas stayed in the process. Python 3.12 watches this way by
    itself where it can (and deprecates choosing); without pidfds (Linux before 5.3, other
    systems) the default stays."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel without pidfd_open, or a sandbox refusing it
        return
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
