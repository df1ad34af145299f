#!/usr/bin/python3
"""Restart time of two or more sliced builds on the same data, alternating.

Issue 17 item 3 asks for a restart with 100k nodes and 50k groups within
1.5 s. On two shared cores one start swings by ±20 %, so builds are compared
start by start: each round starts every binary once, each on a fresh copy of
DATA_DIR (a data dir kept by `sliced_load --parts=scale --keep_scale_data`),
timed from exec to the "serving on" line, then SIGKILLed. Reported per build:
the medians of the wall time, of the process's CPU time (user + system), and
of what the daemon says it spent reading the store and building the state
(its "loaded ..." line; absent in builds before 0901392).

  bench/restart_ab.py --data_dir /tmp/sliced-bench-scale-XXXXXX --rounds 9 \\
      build/server/sliced /tmp/sliced.before
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

LOADED = re.compile(r"in ([\d.]+) s \(store read ([\d.]+) s, state built ([\d.]+) s\)")


def start_once(binary, data_dir):
    """(wall s, cpu s, read s or None, built s or None) of one start."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [binary, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
         "--data_dir=" + data_dir, "--heartbeat_timeout=0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    banner = proc.stdout.readline()
    wall = time.monotonic() - t0
    loaded = LOADED.search(proc.stdout.readline()) if "serving on" in banner else None
    proc.send_signal(signal.SIGKILL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.stdout.close()
    if "serving on" not in banner:
        sys.exit("%s did not start on %s (exit status %d): %r"
                 % (binary, data_dir, status, banner))
    read, built = (float(loaded.group(2)), float(loaded.group(3))) if loaded else (None, None)
    return wall, usage.ru_utime + usage.ru_stime, read, built


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True, help="the data dir to copy for each start")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless every start printed its \"loaded ...\" line")
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sliced-restart-ab-")
    runs = [[] for _ in args.binaries]  # per binary as listed (one may repeat)
    try:
        for _ in range(args.rounds):
            for binary, starts in zip(args.binaries, runs):
                copy = os.path.join(work, "data")
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(args.data_dir, copy)
                starts.append(start_once(binary, copy))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(values):
        values = [v for v in values if v is not None]
        return "%.2f s" % statistics.median(values) if values else "—"

    print("| build | starts (s) | median | CPU | store read | state built |")
    print("| --- | --- | --- | --- | --- | --- |")
    for binary, starts in zip(args.binaries, runs):
        walls, cpus, reads, builts = zip(*starts)
        print("| %s | %s | **%s** | %s | %s | %s |" % (
            binary, " ".join("%.2f" % w for w in walls), med(walls), med(cpus),
            med(reads), med(builts)))
    if args.check and any(start[2] is None for starts in runs for start in starts):
        sys.exit("a start did not print its \"loaded ...\" line")


if __name__ == "__main__":
    main()
