"""A process named by its pid and its start time: is it still the one we started?

A pid alone does not name a process for long: once it exits, the kernel may give the pid
to another. ``revivify cluster`` keeps, for every server it started, the pid and the
process's start time (``/proc/PID/stat`` field 22, clock ticks since boot); the pair names
one process for as long as the machine runs, and `pid_alive` compares both. A zombie (the
process has exited, nobody reaped it) counts as dead.

Split from control.py (which spawns, signals and reaps, and imports attrs, subprocess and
selectors for it) so that ``revivify cluster status``, which only asks /proc, starts on the
standard library's ``os`` alone (issue 31; tests/cli/test_import_budget.py).
"""

from __future__ import annotations

import os


def process_start_ticks(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot, /proc/PID/stat field 22), or
    None if there is no such process or it is a zombie (it has exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # "pid (comm) state ...": comm may hold spaces and parentheses; it ends at the last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def signal_alive(pid: int) -> bool:
    """Whether some process has ``pid`` (signal 0; one we may not signal counts as alive).
    It may be another process than the one that first had the pid: see ``pid_alive``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int, start_ticks: int) -> bool:
    """Whether the process that had `pid` and started at `start_ticks` still runs (not a
    zombie, not another process that got the pid since)."""
    if pid <= 0:
        return False
    if not os.path.isdir("/proc"):  # not Linux: no start time to compare, signal 0 only
        return signal_alive(pid)
    # No start time recorded: the process had already exited when it was spawned (a zombie
    # at once), so whatever has the pid now is another process.
    ticks = process_start_ticks(pid)
    return ticks is not None and start_ticks != 0 and ticks == start_ticks


__all__ = ["pid_alive", "process_start_ticks", "signal_alive"]
