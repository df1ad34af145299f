"""The host's health: what makes the daemon quarantine the node.

Problems (one line each, sent in NodeHeartbeat.health):
- libtpu's slice.error.detected.gauge or megascale.error.detected.gauge
  above 0 (GKE's device plugin turns them into the node conditions
  SliceErrorDetected / MegascaleHangDetected);
- a TPU device (/dev/accel<N>, /dev/vfio/<N>) held open by a process while
  no placement group holds the node: a job that outlived its placement, the
  known cause of hosts that look free but cannot start anything.

Holders are found by reading <root>/proc/<pid>/fd/* links (what lsof and
fuser do); the test and simulated hosts fake them under their root.

Pure functions; safe to call from any thread.
"""
import os
import re
from typing import Callable, Dict, List, Sequence, Tuple

from sliced_agent.tpu_metrics import ERROR_GAUGES

_DEVICE = re.compile(r"^/dev/(accel\d+|vfio/\d+)$")

# The daemon's limits on NodeHeartbeat.health (server/api/convert_nodes.cc):
# a report past them is refused whole, and the host would never be
# quarantined.
MAX_PROBLEMS = 16
MAX_PROBLEM_BYTES = 256


def device_holders(root: str) -> List[Tuple[str, int, str]]:
    """(device, pid, command) for every TPU device file a process holds."""
    proc = os.path.join(root, "proc")
    out = []
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return out
    for pid in sorted(pids, key=int):
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or not ours to read
        devices = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if _DEVICE.match(target):
                devices.add(target)
        if devices:
            command = _command(proc, pid)
            out.extend((d, int(pid), command) for d in sorted(devices))
    return out


def _command(proc: str, pid: str) -> str:
    try:
        # comm is 15 bytes, which may cut a character in two.
        with open(os.path.join(proc, pid, "comm"), errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _line(text: str) -> str:
    """One line of at most MAX_PROBLEM_BYTES bytes (UTF-8)."""
    text = " ".join(text.split()) or "?"
    data = text.encode("utf-8")
    if len(data) <= MAX_PROBLEM_BYTES:
        return text
    return data[:MAX_PROBLEM_BYTES - 3].decode("utf-8", "ignore") + "..."


def problems(gauges: Dict[str, float], holders: Sequence[Tuple[str, int, str]],
             placement_groups: Callable[[], Sequence[str]]) -> List[str]:
    """The host's problems, [] when healthy. placement_groups() is asked only
    when some device is held (it costs a GetNode)."""
    out = ["%s=%g (libtpu)" % (name, gauges[name])
           for name in ERROR_GAUGES if gauges.get(name, 0) > 0]
    if holders and not placement_groups():
        held = ["%s held by pid %d (%s), which no placement owns" % h for h in holders]
        room = MAX_PROBLEMS - len(out)
        if len(held) > room:
            # A job and its forked workers hold every device: the first
            # ones, then how many more and by which pids.
            rest = holders[room - 1:]
            pids = sorted({pid for _, pid, _ in rest})
            held = held[:room - 1] + ["%d more devices held by pid(s) %s, which no placement "
                                      "owns" % (len(rest), ", ".join(map(str, pids)))]
        out.extend(held)
    return [_line(p) for p in out[:MAX_PROBLEMS]]
