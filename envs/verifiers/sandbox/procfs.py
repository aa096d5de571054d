"""Process trees from Linux ``/proc``: children, descendants, resident memory, CPU seconds.

Warm provers are long-lived grandchildren (a pool worker's ``coqidetop``, a HOL Light zygote),
so ``getrusage(RUSAGE_CHILDREN)`` never sees them: what they use is read here from ``/proc``.
Every function tolerates processes that exit while it reads (they are skipped), and returns
empty results where there is no ``/proc``.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable

__all__ = ["children", "cpu_seconds", "descendants", "parent_map", "program_tree_cpu_s", "rss_bytes", "tree_cpu_s"]


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state is [0], ppid [1], utime [11])."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def parent_map(*, zombies: bool = True) -> dict[int, list[int]]:
    """ppid -> child pids, from one scan of ``/proc`` (``zombies=False`` leaves out exited, unreaped ones)."""
    tree: dict[int, list[int]] = {}
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return tree
    for name in entries:
        fields = _stat_fields(int(name))
        if fields is None or len(fields) < 2 or (not zombies and fields[0] == b"Z"):
            continue
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (its threads' ``children`` files; a ``/proc`` scan where the kernel lacks them)."""
    found: set[int] = set()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                found.update(int(c) for c in fh.read().split())
        except FileNotFoundError:
            return sorted(parent_map().get(pid, []))
        except (OSError, ValueError):
            continue
    return sorted(found)


def descendants(pid: int, *, zombies: bool = True) -> list[int]:
    """Every process below ``pid``, parents before their children (``zombies=False``: exited, unreaped ones left out).

    Walks ``children`` files, so a small tree costs a few reads however many processes the machine runs.
    """
    out: list[int] = []
    stack = children(pid)
    while stack:
        child = stack.pop()
        if zombies or (_stat_fields(child) or [b"Z"])[0] != b"Z":
            out.append(child)
        stack.extend(children(child))
    return out


def rss_bytes(pids: Iterable[int]) -> int:
    """Resident memory of ``pids`` together, in bytes (shared pages count once per process)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def cpu_seconds(pids: Iterable[int], *, reaped_children: bool = False) -> float:
    """User + system CPU seconds ``pids`` have used so far (live processes only); with ``reaped_children``, also
    what the children each has waited for used (``cutime``/``cstime``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    columns = (11, 12, 13, 14) if reaped_children else (11, 12)
    total = 0.0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None:  # gone
            continue
        try:
            total += sum(int(fields[i]) for i in columns) / ticks
        except (ValueError, IndexError):
            continue
    return total


def program_tree_cpu_s(pids: Iterable[int]) -> float:
    """CPU seconds of ``pids`` and everything below them, reaped children included (user + system).

    A prover's helpers (CoqHammer's ATPs, ``native_compute``'s compiler) run as its children: each live process is
    counted with the children it has reaped (``cutime``/``cstime``), so a helper's CPU is counted while it runs and
    stays counted after it exits. An exited, unreaped child is counted by its own fields until its parent reaps it.
    """
    tree = dict.fromkeys(pid for root in pids for pid in (root, *descendants(root)))  # each pid once
    return cpu_seconds(tree, reaped_children=True)


def tree_cpu_s(pid: int | None = None) -> float:
    """CPU seconds of ``pid``'s live descendants plus this process's reaped children (and itself when ``pid`` is us).

    Call it before and after a piece of work: the difference is what the work cost, provers included.
    """
    me = os.getpid()
    pid = me if pid is None else pid
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = kids.ru_utime + kids.ru_stime
    if pid == me:
        own = resource.getrusage(resource.RUSAGE_SELF)
        total += own.ru_utime + own.ru_stime
    return total + cpu_seconds(descendants(pid, zombies=False))
