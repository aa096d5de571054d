"""Which TCP ports a process tree listens on, and where: for the tests that Ray (started by proofgym or by a
test's cluster) listens on 127.0.0.1 only. Linux only (``/proc``)."""

from __future__ import annotations

import os
import socket

from proofgym.envs.verifiers.sandbox import procfs


def _listening_inodes() -> dict[str, tuple[str, int]]:
    """socket inode -> (address, port) of every listening TCP socket on the machine."""
    found = {}
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/net/{name}") as fh:
            for line in fh.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":  # TCP_LISTEN
                    continue
                ip_hex, port_hex = fields[1].split(":")
                raw = bytes.fromhex(ip_hex)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # per-word byte order
                found[fields[9]] = (socket.inet_ntop(family, raw), int(port_hex, 16))
    return found


def listeners(root_pid: int) -> list[tuple[str, int, str]]:
    """(address, port, process name) of every socket that ``root_pid`` or a descendant listens on."""
    inodes = _listening_inodes()
    out = []
    for pid in [root_pid, *procfs.descendants(root_pid, zombies=False)]:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                try:
                    with open(f"/proc/{pid}/comm") as fh:
                        name = fh.read().strip()
                except OSError:
                    continue
                out.append((*inodes[target[8:-1]], name))
    return out
