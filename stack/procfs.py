"""What /proc says about the stack's processes: children and process trees, CPU time,
start time and state, memory, open descriptors, TCP sockets and their states, and which
gunicorn workers accept connections. Read only; used by the launcher (rolling reloads),
the state file, the benchmarks and the tests."""

from __future__ import annotations

import ipaddress
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path


def children(pid: int) -> list[int]:
    """Direct children of `pid` (e.g. gunicorn's workers), from /proc."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return sorted(set(found))


def descendants(pid: int) -> list[int]:
    out = []
    for child in children(pid):
        out += [child, *descendants(child)]
    return out


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants, parents first (a component: a pool's master and
    its workers, Envoy, the simulator)."""
    return [pid, *descendants(pid)]


#: Clock ticks a second (the unit of /proc/<pid>/stat's CPU times).
CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: ``[0]`` is field 3 (the
    state), ``[11]``/``[12]`` utime/stime, ``[19]`` the start time. None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its ")".
    return text.rsplit(")", 1)[1].split()


def group_members(pgid: int) -> list[int]:
    """The processes of process group `pgid` that still run (zombies left out: an
    orphan that exited waits for whoever adopted it to reap it)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return sorted(members)


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of one process (all its threads) in seconds; None if it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_s(pid: int) -> dict[str, float]:
    """utime + stime of each of `pid`'s threads in seconds, by thread name (comm;
    threads of one name summed); empty once it is gone."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def rss_kib(pid: int) -> int:
    """Resident memory of `pid` in KiB (0 once it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _owned_tcp_rows(pids: Iterable[int]) -> Iterator[list[str]]:
    """The /proc/net/tcp{,6} rows (split into fields) of the sockets the processes hold."""
    pids = list(pids)
    inodes: set[str] = set()
    for pid in pids:
        inodes |= _socket_inodes(pid)
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pids[0]}/net/{table}").read_text().splitlines()[1:]
        except (OSError, IndexError):
            continue
        for line in lines:
            parts = line.split()
            if parts[9] in inodes:
                yield parts


def tcp_sockets(pids: Iterable[int]) -> list[tuple[str, int, str, int, str]]:
    """TCP sockets the processes hold open: (local ip, port, remote ip, port, state)."""
    out = []
    for parts in _owned_tcp_rows(pids):
        (lip, lport), (rip, rport) = (_addr(parts[1]), _addr(parts[2]))
        out.append((lip, lport, rip, rport, TCP_STATES.get(parts[3], parts[3])))
    return out


def _addr(text: str) -> tuple[str, int]:
    """/proc/net/tcp{,6} 'hex ip:hex port' -> ('127.0.0.1', 8080); the address is
    stored as 32-bit words in host (little-endian) byte order."""

    ip_hex, port_hex = text.split(":")
    raw = bytes.fromhex(ip_hex)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return str(address), int(port_hex, 16)


def connections_to(pids: Iterable[int], port: int) -> Counter[str]:
    """States of the TCP connections `pids` hold to `port`."""
    return Counter(state for _, _, _, rport, state in tcp_sockets(pids) if rport == port)


def listening_inode(pids: Iterable[int], port: int) -> str | None:
    """The inode (decimal text) of the listening socket on `port` among the pids' sockets."""
    for parts in _owned_tcp_rows(pids):
        if parts[3] == "0A" and _addr(parts[1])[1] == port:
            return parts[9]
    return None


def accepting(pid: int, inode: str) -> bool:
    """Whether process `pid` waits for connections on the listening socket `inode`: its
    event loop's epoll set holds that socket (a gunicorn worker does once it has
    loaded the app and started its server; a booting or stopping one does not)."""
    needle = f"ino:{int(inode):x} "
    try:
        entries = list(Path(f"/proc/{pid}/fdinfo").iterdir())
    except OSError:
        return False
    for entry in entries:
        try:
            text = entry.read_text()
        except OSError:
            continue
        if "tfd:" in text and needle in text:
            return True
    return False


def open_fds(pid: int) -> int:
    """Open file descriptors of `pid` (0 once it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def serving_workers(master: int, port: int) -> list[int]:
    """The workers of a gunicorn master that serve on `port` (app loaded, accept loop
    running); a booting or stopping worker is not among them."""
    inode = listening_inode([master], port)
    if inode is None:
        return []
    return [pid for pid in children(master) if accepting(pid, inode)]
