#!/usr/bin/env python3
"""The CPU time a command and every process it starts spend, orphans included: for comparing a test
file before and after a change on a machine whose load varies (wall time there says little).

    scripts/cpu_time.py .venv/bin/python -m pytest -q tests/test_post_validation.py

runs the command as a child subreaper (Linux): a process whose parent ends (a fork server, a rank
launched through it) is handed to this one, which waits for it, so its CPU time counts too. The last
line, on stderr: the command's exit status, its wall time and the CPU time (user + system) of all.
"""
from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main(argv: list) -> int:
    if not argv:
        print("cpu_time: give the command to run", file=sys.stderr)
        return 2
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("cpu_time: this system has no child subreapers (Linux only)", file=sys.stderr)
        return 2
    started = time.monotonic()
    command = subprocess.Popen(argv)
    status, wall = 0, 0.0
    while True:  # the command, then whatever it left (reparented here) as each ends
        try:
            pid, code = os.wait()
        except ChildProcessError:
            break
        if pid == command.pid:
            status, wall = os.waitstatus_to_exitcode(code), time.monotonic() - started
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"cpu_time: exit status {status}, wall {wall:.1f} s, CPU {used.ru_utime + used.ru_stime:.1f} s "
          f"(user {used.ru_utime:.1f}, system {used.ru_stime:.1f})", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
