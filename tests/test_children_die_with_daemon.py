"""Every child process dies with its daemon, ``kill -9`` included (issue 36: an audit
export outlived it): command skills and audit exports are started with ``die_with_parent``,
MCP servers (whose SDK takes no ``preexec_fn``) through ``dying_with_parent``. A command
skill's whole run against a killed daemon: tests/test_command_skill_crash.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from butler.runtime.children import die_with_parent, dying_with_parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux's")


def test_a_wrapped_child_keeps_its_pid_and_a_preexec_child_its_signal() -> None:
    """The wrapper execs the command in place (the pid the spawner knows is the
    command's); ``die_with_parent`` leaves the child with SIGKILL (9) as its parent-death
    signal, which /proc shows."""
    shown = subprocess.run(dying_with_parent([sys.executable, "-c",
                                              "import os; print(os.getpid())"]),
                           capture_output=True, text=True, check=True)
    assert shown.stdout.strip().isdigit()
    probe = ("import ctypes, os; v = ctypes.c_int(); "
             "ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value)")  # PR_GET_PDEATHSIG
    for argv, preexec in ((dying_with_parent([sys.executable, "-c", probe]), None),
                          ([sys.executable, "-c", probe], die_with_parent)):
        done = subprocess.run(argv, capture_output=True, text=True, check=True,
                              preexec_fn=preexec)
        assert done.stdout.strip() == "9"
