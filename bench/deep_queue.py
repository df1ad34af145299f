"""Create/remove throughput beside a deep queue of waiting groups.

Issue 17 asks for no stalls as the state grows. A cluster whose nodes are
full keeps a backlog of PENDING groups while other work comes and goes; each
release may let a queued group fit, so the daemon re-tries its queue. This
measures what that backlog costs the churn beside it: per queue depth and
repetition a fresh daemon (durable commits, `--heartbeat_timeout=0`), a fleet
of CPU nodes, each node filled to all but 10 CPUs by one group, then `depth`
groups that ask more than any node has left (PENDING), then sliced_load's
create_remove phase (one {CPU: 1} bundle per create, removed right after) at
64 clients. The fill is done with sliced_goload (bench/goload).

  bench/deep_queue.py --daemon build-bench/server/sliced \\
      --go_client build-bench/bench/sliced_goload \\
      --load build-bench/bench/sliced_load --out_dir bench/results

Writes deep_queue.json and deep_queue.md to --out_dir. With --check, exits 1
unless every phase completed ops without errors.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import go_ratio  # bench/go_ratio.py: the daemon, the fleet and sliced_goload

CREATE = ('{"name": "queue-{{.RequestNumber}}", '
          '"bundles": [{"resources": {"CPU": %d}}]}')


def fill(args, daemon, depth):
    """One group of node_cpus - 10 CPUs per node, then `depth` groups of
    more than 10 CPUs, which wait."""
    for cpus, count in ((args.node_cpus - 10, args.fleet_nodes),
                        (args.queued_cpus, depth)):
        if count == 0:
            continue
        r = go_ratio.goload(args, daemon.target,
                            "sliced.v1.Placement/CreatePlacementGroup",
                            CREATE % cpus, clients=16, total=count)
        if r["codes"] != {"OK": count}:
            sys.exit(f"deep_queue: filling: {r['codes']} {r.get('first_error')}")


def churn(args, daemon, work):
    out = os.path.join(work, "load")
    subprocess.run([args.load, "--target=" + daemon.target,
                    "--parts=throughput", "--workloads=create_remove",
                    # The fleet fill() filled: registering sliced_load's own
                    # over it (the same node ids) is refused under the groups.
                    "--register_fleet=false",
                    f"--clients={args.clients}", "--reps=1",
                    f"--duration={args.duration}", "--out_dir=" + out],
                   check=True, capture_output=True, text=True)
    with open(os.path.join(out, "load.json")) as f:
        runs = json.load(f)["throughput"]
    return next(r for r in runs if r["workload"] == "create_remove")


def render(args, rows, load_start, load_end, started):
    lines = [
        f"sliced_load create_remove (a one-{{CPU: 1}}-bundle create, then its "
        f"remove; durable commits) at {args.clients} clients against "
        f"`{go_ratio.shown(args.daemon)}`, a fresh daemon per repetition on "
        f"{args.fleet_nodes:,} CPU nodes of {args.node_cpus:g} CPUs, each "
        f"filled to all but 10 CPUs; then the queue: groups of "
        f"{{CPU: {args.queued_cpus}}}, PENDING. {args.duration:g} s measured "
        f"per phase, {args.reps} repetition(s); cells are medians, the "
        f"ratio is to the run with no queue. Run {started}; load average "
        f"{load_start} at the start, {load_end} at the end.",
        "",
        "| queued groups | ops/s | ratio to no queue | p50 / p99 ms | errors |",
        "| --- | --- | --- | --- | --- |",
    ]
    base = None
    for depth in args.queued:
        rs = [r for r in rows if r["queued"] == depth]
        med = lambda key: statistics.median(r[key] for r in rs)
        ops = med("ops_per_s")
        if base is None and depth == 0:
            base = ops
        each = ", ".join(f"{r['ops_per_s']:.0f}" for r in rs)
        ratio = f"{ops / base:.2f}" if base else "—"
        lines.append(
            f"| {depth:,} | {ops:.0f} ({each}) | {ratio} | "
            f"{med('p50_us') / 1000:.2f} / {med('p99_us') / 1000:.2f} | "
            f"{sum(r['errors'] for r in rs)} |")
    lines += [
        "",
        "The queue is walked after releases only when a node they freed "
        "covers the least a waiting group asks of one node (before a create "
        "that follows them in the commit group, and at the group's end); "
        "otherwise the next preemption check walks it, about once a second "
        "(docs/architecture.md).",
    ]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    go_ratio.add_common_flags(p)
    p.add_argument("--load", required=True, help="sliced_load")
    p.add_argument("--queued", default="0,2000,10000",
                   help="queue depths, comma-separated; 0 first for the ratio")
    p.add_argument("--queued_cpus", type=int, default=100)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--duration", type=float, default=3)
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args()
    args.queued = [int(x) for x in args.queued.split(",")]
    args.warmup = 0.5  # go_ratio.goload's, unused for fixed counts
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start = go_ratio.load_average()
    rows = []
    for rep in range(args.reps):
        for depth in args.queued:
            daemon = go_ratio.Daemon(args.daemon, args.work_dir)
            try:
                go_ratio.register_fleet(args, daemon.target)
                fill(args, daemon, depth)
                r = churn(args, daemon, daemon.dir)
            finally:
                daemon.stop()
            r["queued"] = depth
            rows.append(r)
            print(f"deep_queue: {depth} queued: {r['ops_per_s']:.0f} ops/s, "
                  f"{r['errors']} errors", file=sys.stderr)
    load_end = go_ratio.load_average()
    go_ratio.write_results(args.out_dir, "deep_queue",
                           {"runs": rows, "started": started},
                           render(args, rows, load_start, load_end, started))
    if args.check and any(r["errors"] or r["ops"] == 0 for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
