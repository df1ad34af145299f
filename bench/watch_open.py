#!/usr/bin/python3
"""Creates while unfiltered watches open over many groups.

Issue 17 asks for no stalls. Opening a WatchPlacementGroups stream sends the
current state first; for an unfiltered stream that is every group. Until
6b79386 the daemon built and serialized that whole state under the lock
every commit's install takes, so the writer waited for it. This measures
what that costs the creates beside it: per repetition and daemon (--daemon,
and --baseline when given, alternating) a fresh daemon (durable commits,
`--heartbeat_timeout=0`), go_ratio.py's fleet, --groups one-bundle groups
(sliced_goload), then two phases of BASIC one-bundle creates at --clients
clients (sliced_goload): quiet, and while one client (Python, grpcio, the
events kept as bytes) keeps opening an unfiltered watch, reading its
current state (at least --groups events) and closing it.

  bench/watch_open.py --daemon build-bench/server/sliced \\
      --baseline OLD_SLICED --go_client build-bench/bench/sliced_goload \\
      --out_dir bench/results

A stream the daemon ends before its current state is read (ABORTED: it
fell behind) is counted and opened again. --daemon_flag passes a flag to
the daemons, e.g. a small --max_watch_buffer_bytes, which shows how a watch
opened during the creates fares against the stream's bound.

Writes watch_open.json and watch_open.md to --out_dir. With --check, exits 1
unless every phase completed creates without errors, the watcher read
at least one current state and no stream ended early.
"""

import argparse
import statistics
import sys
import threading
import time

import grpc

import go_ratio  # bench/go_ratio.py: the daemon, the fleet and sliced_goload

FILL = ('{"name": "fill-{{.WorkerID}}-{{.RequestNumber}}", '
        '"bundles": [{"resources": {"CPU": 1}}], "view": "BASIC"}')
WATCH = "/sliced.v1.Placement/WatchPlacementGroups"


class Watcher(threading.Thread):
    """Opens an unfiltered watch, reads `least` events, closes it; again,
    until stop() is called. Records how long each current state took."""

    def __init__(self, target, least):
        super().__init__(daemon=True)
        self.channel = grpc.insecure_channel(target)
        self.watch = self.channel.unary_stream(
            WATCH, request_serializer=lambda b: b,
            response_deserializer=lambda b: b)
        self.least = least
        self.halt = threading.Event()
        self.seconds = []  # per current state read
        self.ended = 0  # streams the daemon ended before their state was read
        self.error = None  # the first such end

    def run(self):
        while not self.halt.is_set():
            t0 = time.monotonic()
            stream = self.watch(b"")  # an empty request: every group
            count = 0
            try:
                for _ in stream:
                    count += 1
                    if count >= self.least or self.halt.is_set():
                        break
            except grpc.RpcError as e:
                if not self.halt.is_set():
                    self.ended += 1
                    self.error = self.error or f"{e.code()}: {e.details()}"
            stream.cancel()
            if count >= self.least:
                self.seconds.append(time.monotonic() - t0)

    def stop(self):
        self.halt.set()
        self.join()
        self.channel.close()


def one_daemon(args, binary):
    """A fresh daemon: fleet, fill, then the quiet and the watched phase."""
    daemon = go_ratio.Daemon(binary, args.work_dir,
                             go_ratio.SLICED_FLAGS + args.daemon_flag)
    try:
        go_ratio.register_fleet(args, daemon.target)
        r = go_ratio.goload(args, daemon.target,
                            "sliced.v1.Placement/CreatePlacementGroup", FILL,
                            clients=16, total=args.groups)
        if r["codes"] != {"OK": args.groups}:
            sys.exit(f"watch_open: filling: {r['codes']} "
                     f"{r.get('first_error')}")
        quiet = go_ratio.phase(args, daemon, "create", args.clients)
        watcher = Watcher(daemon.target, args.groups)
        watcher.start()
        try:
            watched = go_ratio.phase(args, daemon, "create", args.clients)
        finally:
            watcher.stop()
        return {"quiet": quiet, "watched": watched,
                "opens": len(watcher.seconds),
                "ended": watcher.ended,
                "open_s": (statistics.median(watcher.seconds)
                           if watcher.seconds else None),
                "watch_error": watcher.error}
    finally:
        daemon.stop()


def render(args, runs, load_start, load_end, started):
    binaries = [("daemon", args.daemon)]
    if args.baseline:
        binaries.append(("baseline", args.baseline))
    lines = [
        f"BASIC one-{{CPU: 1}}-bundle creates (sliced_goload, "
        f"{args.clients} clients, {args.duration:g} s measured, "
        f"{args.warmup:g} s warm-up) on {args.fleet_nodes:,} CPU nodes "
        f"holding {args.groups:,} groups: quiet, then while one client "
        f"keeps opening an unfiltered watch, reading its current state and "
        f"closing it. A commit held up by the watch's current state holds "
        f"up the creates in flight (one per client), so it shows in the "
        f"slowest create, not in the percentiles. A fresh daemon per "
        f"repetition and binary"
        f"{' (' + ' '.join(args.daemon_flag) + ')' if args.daemon_flag else ''}, "
        f"{args.reps} repetition(s), the binaries alternating; cells are "
        f"medians (each repetition in brackets). Run {started}; load "
        f"average {load_start} at the start, {load_end} at the end.",
        "",
        "| daemon | quiet: creates/s, p99 / slowest ms | watched: creates/s, "
        "p99 / slowest ms | ratio watched / quiet: creates/s, p99 | "
        "current states read (median s each) | streams ended early |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, binary in binaries:
        rs = [r for r in runs if r["binary"] == key]
        med = lambda f: statistics.median(f(r) for r in rs)
        each = lambda f: ", ".join(f"{f(r):.2f}" for r in rs)
        q_rps = lambda r: r["quiet"]["rps"]
        w_rps = lambda r: r["watched"]["rps"]
        rps_ratio = lambda r: w_rps(r) / q_rps(r)
        p99_ratio = lambda r: r["watched"]["p99_ms"] / r["quiet"]["p99_ms"]
        opens = sum(r["opens"] for r in rs)
        open_s = [r["open_s"] for r in rs if r["open_s"] is not None]
        lines.append(
            f"| `{go_ratio.shown(binary)}` | {med(q_rps):,.0f}, "
            f"{med(lambda r: r['quiet']['p99_ms']):.1f} / "
            f"{med(lambda r: r['quiet']['max_ms']):.1f} | "
            f"{med(w_rps):,.0f}, "
            f"{med(lambda r: r['watched']['p99_ms']):.1f} / "
            f"{med(lambda r: r['watched']['max_ms']):.1f} | "
            f"{med(rps_ratio):.2f} ({each(rps_ratio)}), "
            f"{med(p99_ratio):.2f} ({each(p99_ratio)}) | {opens} "
            f"({statistics.median(open_s) if open_s else 0:.2f} s) | "
            f"{sum(r['ended'] for r in rs)} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    go_ratio.add_common_flags(p)
    p.add_argument("--baseline", help="another sliced binary, alternated")
    p.add_argument("--groups", type=int, default=50000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--daemon_flag", action="append", default=[],
                   help="a flag for the daemons (repeatable)")
    args = p.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start = go_ratio.load_average()
    binaries = [("daemon", args.daemon)]
    if args.baseline:
        binaries.append(("baseline", args.baseline))
    runs = []
    for rep in range(args.reps):
        for key, binary in binaries if rep % 2 == 0 else binaries[::-1]:
            r = one_daemon(args, binary)
            r["binary"], r["rep"], r["groups"] = key, rep, args.groups
            runs.append(r)
            print(f"watch_open: {key} rep {rep}: quiet "
                  f"{r['quiet']['rps']:.0f}/s p99 {r['quiet']['p99_ms']:.1f} "
                  f"ms; watched {r['watched']['rps']:.0f}/s p99 "
                  f"{r['watched']['p99_ms']:.1f} ms, slowest "
                  f"{r['watched']['max_ms']:.0f} ms; {r['opens']} opens, "
                  f"{r['ended']} ended early",
                  file=sys.stderr)
    load_end = go_ratio.load_average()
    go_ratio.write_results(args.out_dir, "watch_open",
                           {"runs": runs, "started": started},
                           render(args, runs, load_start, load_end, started))
    bad = [r for r in runs
           if r["quiet"]["errors"] or r["watched"]["errors"]
           or r["opens"] == 0 or r["watch_error"]]
    if bad:
        print(f"watch_open: {len(bad)} run(s) with errors or no current "
              f"state read: {[r['watch_error'] for r in bad]}",
              file=sys.stderr)
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
