#!/usr/bin/python3
"""Create throughput against the health check, driven by a Go client.

Issue 17 item 2 and DESIGN §7 state the gRPC target as a ratio measured with
ghz: one-bundle CreatePlacementGroup calls against grpc.health.v1.Health/Check
at the same concurrency, in the same run, on a fleet of 2,000 CPU nodes. ghz
is not packaged for Debian; bench/goload (sliced_goload) does per call what
ghz does (a JSON template rendered and parsed into a dynamic message from the
server's reflection, grpc-go, one collecting goroutine). This script pairs
its phases the way sliced_load pairs its own: per repetition a fresh daemon
(durable commits, `--heartbeat_timeout=0`), the fleet registered, then per
client count a health phase and right after it a create phase.

  bench/go_ratio.py --daemon build-bench/server/sliced \\
      --go_client build-bench/bench/sliced_goload --out_dir bench/results

With --calibration build-bench/bench/sliced_calib, each repetition also
measures DESIGN §7's calibration server (bench/calib: durable group commit
and nothing else) with the same client and phases, and go.md gives sliced's
ratio as a share of the calibration's.

Writes go.json and go.md to --out_dir. With --check, exits 1 unless every
phase completed calls without errors.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# A create that asks for the small reply (its id, state and reason), as a
# caller that follows the group by its id does; create_full takes the whole
# group back (the API's default).
CREATE = ('{"name": "go-{{.WorkerID}}-{{.RequestNumber}}", '
          '"bundles": [{"resources": {"CPU": 1}}], "view": "BASIC"}')
CREATE_FULL = ('{"name": "go-full-{{.WorkerID}}-{{.RequestNumber}}", '
               '"bundles": [{"resources": {"CPU": 1}}]}')
METHODS = {
    "health": ("grpc.health.v1.Health/Check", "{}"),
    "create": ("sliced.v1.Placement/CreatePlacementGroup", CREATE),
    "create_full": ("sliced.v1.Placement/CreatePlacementGroup", CREATE_FULL),
}
CREATES = ("create", "create_full")


def cpu_seconds(pid):
    """utime + stime of `pid` from /proc, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The daemon's flags beyond --listen and --data_dir.
SLICED_FLAGS = ["--metrics_listen=127.0.0.1:0", "--heartbeat_timeout=0"]


class Daemon:
    """The sliced binary (or sliced_calib, with flags=[]) on a free loopback
    port and a fresh data dir."""

    def __init__(self, binary, work_dir, flags=SLICED_FLAGS):
        self.dir = tempfile.mkdtemp(prefix="go-ratio-", dir=work_dir)
        self.log = open(os.path.join(self.dir, "daemon.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--listen=127.0.0.1:0",
             "--data_dir=" + os.path.join(self.dir, "data")] + flags,
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        banner = self.proc.stdout.readline()  # "NAME: serving on H:P, ..."
        if "serving on " not in banner:
            self.stop()
            sys.exit(f"go_ratio: {binary} did not start: {banner!r}; "
                     f"see {self.log.name}")
        self.target = banner.split("serving on ", 1)[1].split(",", 1)[0]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def goload(args, target, method, data, clients=1, total=0):
    call, _ = METHODS.get(method, (method, None))
    cmd = [args.go_client, "-target", target, "-call", call, "-d", data,
           "-c", str(clients)]
    if total:
        cmd += ["-n", str(total)]
    else:
        cmd += ["-z", f"{args.duration}s", "-warmup", f"{args.warmup}s"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def register_fleet(args, target):
    """args.fleet_nodes CPU nodes, in RegisterNodes batches of 1,000."""
    with tempfile.TemporaryDirectory() as tmp:
        for start in range(0, args.fleet_nodes, 1000):
            nodes = [{"node_id": f"cpu-{i:06d}",
                      "address": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
                      "labels": {"ray.io/node-group": "cpu"},
                      "resources": {"CPU": args.node_cpus,
                                    "memory": 256 * 2**30}}
                     for i in range(start, min(start + 1000, args.fleet_nodes))]
            path = os.path.join(tmp, f"batch-{start}.json")
            with open(path, "w") as f:
                json.dump({"nodes": nodes}, f)
            r = goload(args, target, "sliced.v1.Inventory/RegisterNodes",
                       "@" + path, total=1)
            if r["codes"] != {"OK": 1}:
                sys.exit(f"go_ratio: RegisterNodes: {r.get('first_error')}")


def phase(args, daemon, workload, clients):
    before, t0 = cpu_seconds(daemon.proc.pid), time.monotonic()
    r = goload(args, daemon.target, workload, METHODS[workload][1], clients)
    wall = time.monotonic() - t0
    r["workload"] = workload
    r["daemon_cpu_cores"] = (cpu_seconds(daemon.proc.pid) - before) / wall
    r["client_cpu_cores"] = r["client_cpu_seconds"] / wall
    r["errors"] = r["calls"] - r["codes"].get("OK", 0)
    print(f"go_ratio: {clients} clients, {workload}: {r['rps']:.0f}/s, "
          f"{r['errors']} errors", file=sys.stderr)
    return r


def run_sliced(args, rep):
    """One repetition against sliced: per client count a health phase, then
    the two create phases."""
    runs = []
    daemon = Daemon(args.daemon, args.work_dir)
    try:
        register_fleet(args, daemon.target)
        for c in args.clients:
            health = phase(args, daemon, "health", c)
            runs.append(health)
            # Groups accumulate: alternate which create phase comes first so
            # that neither always meets the fuller daemon.
            for w in CREATES if rep % 2 == 0 else CREATES[::-1]:
                create = phase(args, daemon, w, c)
                create["paired_health_rps"] = health["rps"]
                runs.append(create)
    finally:
        daemon.stop()
    return [dict(r, server="sliced") for r in runs]


def run_calibration(args, rep):
    """One repetition against sliced_calib (DESIGN §7's calibration server):
    per client count a health phase, then BASIC creates."""
    runs = []
    daemon = Daemon(args.calibration, args.work_dir, flags=[])
    try:
        for c in args.clients:
            health = phase(args, daemon, "health", c)
            create = phase(args, daemon, "create", c)
            create["paired_health_rps"] = health["rps"]
            runs += [health, create]
    finally:
        daemon.stop()
    return [dict(r, server="calibration") for r in runs]


def shown(path):
    """`path` relative to the repository when it is inside it."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rel = os.path.relpath(os.path.abspath(path), repo)
    return path if rel.startswith("..") else rel


def render(args, runs, load_start, load_end, started):
    lines = [
        f"sliced_goload (bench/goload: Go, grpc-go, ghz's per-call steps) "
        f"against `{shown(args.daemon)}` on a fresh RocksDB dir per repetition "
        f"(durable: synced group commits; `--heartbeat_timeout=0`) holding "
        f"{args.fleet_nodes:,} CPU nodes of {args.node_cpus:g} CPUs. Each "
        f"phase: {args.warmup:g} s warm-up, {args.duration:g} s measured; "
        f"{args.reps} repetition(s). Per repetition and client count a "
        f"health-check phase and right after it two create phases "
        f"(CreatePlacementGroup of one {{CPU: 1}} bundle, a name per call, "
        f"never removed: ghz runs one method): `create` asks for the small "
        f"reply (`\"view\": \"BASIC\"`: id, state, reason), `create_full` "
        f"takes the whole group back (the default). The ratio is creates ÷ "
        f"that health check (per repetition, median first); other cells are "
        f"medians. CPU columns cover each whole phase, warm-up included. "
        f"Run {started}; load average {load_start} at the start, {load_end} "
        f"at the end.",
        "",
        "| clients | workload | calls/s | ratio to health | p50 / p99 ms | "
        "errors | client CPU (cores) | client CPU per call (µs) | "
        "daemon CPU (cores) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in args.clients:
        for w in ("health",) + CREATES:
            rs = [r for r in runs if r["concurrency"] == c and
                  r["workload"] == w and r["server"] == "sliced"]
            med = lambda key: statistics.median(r[key] for r in rs)
            ratio = "—"
            if w in CREATES:
                ratio = median_cell(
                    list(ratios(runs, "sliced", w, c).values()))
            lines.append(
                f"| {c} | {w} | {med('rps'):.0f} | {ratio} | "
                f"{med('p50_ms'):.2f} / {med('p99_ms'):.2f} | "
                f"{sum(r['errors'] for r in rs)} | {med('client_cpu_cores'):.2f} | "
                f"{client_us_per_call(rs):.0f} | {med('daemon_cpu_cores'):.2f} |")
    lines += [
        "",
        "Client CPU per call counts the warm-up's calls' CPU against the "
        "measured calls only, so it reads a little high. The issue's ghz "
        "figures on this class of machine (at 64 clients): health 24.4k/s, "
        "creates 8.9k/s, ratio 0.365; DESIGN §7's calibration: health "
        "~13k/s.",
    ]
    if any(r["server"] == "calibration" for r in runs):
        lines += [""] + render_calibration(args, runs)
    return "\n".join(lines) + "\n"


def median_cell(xs):
    """The median in bold, then each value when there are several."""
    out = f"**{statistics.median(xs):.2f}**"
    if len(xs) > 1:
        out += " (" + ", ".join(f"{x:.2f}" for x in xs) + ")"
    return out


def client_us_per_call(rs):
    return statistics.median(
        r["client_cpu_seconds"] / max(1, r["calls"]) * 1e6 for r in rs)


def ratios(runs, server, workload, clients):
    """Per repetition: creates/s ÷ the paired health check's."""
    return {r["rep"]: r["rps"] / r["paired_health_rps"] for r in runs
            if r["server"] == server and r["workload"] == workload and
            r["concurrency"] == clients}


def render_calibration(args, runs):
    lines = [
        f"**The calibration server** (`{shown(args.calibration)}`, "
        f"bench/calib: DESIGN §7's hand-built server, which reached "
        f"0.58–0.60 with ghz at 64 clients). One writer thread takes every "
        f"waiting create, writes one ~200-byte record per create in one "
        f"RocksDB batch, syncs it and answers (id and state); nothing else. "
        f"Same client, same phases, a fresh data dir per repetition, run "
        f"beside sliced in each repetition (which of the two first "
        f"alternates). The last column is sliced's BASIC ratio as a share "
        f"of the calibration's, per repetition, median first.",
        "",
        "| clients | health/s | creates/s | ratio to health | p50 / p99 ms | "
        "errors | client CPU per create (µs) | daemon CPU (cores) | "
        "sliced's share of it |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in args.clients:
        cal = ratios(runs, "calibration", "create", c)
        mine = ratios(runs, "sliced", "create", c)
        share = [mine[rep] / cal[rep] for rep in sorted(cal) if rep in mine]
        rs = {w: [r for r in runs if r["server"] == "calibration" and
                  r["workload"] == w and r["concurrency"] == c]
              for w in ("health", "create")}
        med = lambda w, key: statistics.median(r[key] for r in rs[w])
        lines.append(
            f"| {c} | {med('health', 'rps'):.0f} | {med('create', 'rps'):.0f} "
            f"| {median_cell([cal[rep] for rep in sorted(cal)])} | "
            f"{med('create', 'p50_ms'):.2f} / {med('create', 'p99_ms'):.2f} | "
            f"{sum(r['errors'] for r in rs['create'])} | "
            f"{client_us_per_call(rs['create']):.0f} | "
            f"{med('create', 'daemon_cpu_cores'):.2f} | "
            f"{median_cell(share) if share else '—'} |")
    return lines


def add_common_flags(p):
    """The flags go_ratio.py and deep_queue.py share: the binaries, the
    fleet, where the daemons and the results go."""
    p.add_argument("--daemon", required=True, help="the sliced binary")
    p.add_argument("--go_client", required=True, help="sliced_goload")
    p.add_argument("--fleet_nodes", type=int, default=2000)
    # A v6e host's vCPUs: room for every create of a run without nodes
    # holding thousands of bundles each.
    p.add_argument("--node_cpus", type=float, default=180)
    p.add_argument("--work_dir", default=tempfile.gettempdir())
    p.add_argument("--out_dir", default=".")
    p.add_argument("--check", action="store_true")


def write_results(out_dir, name, payload, markdown):
    """NAME.json (the raw runs) and NAME.md (the table) into out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(payload, f, indent=1)
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(markdown)


def load_average():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_flags(p)
    p.add_argument("--clients", default="16,64")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--calibration", default="",
                   help="sliced_calib: also measure DESIGN §7's calibration "
                        "server in each repetition")
    args = p.parse_args()
    args.clients = [int(c) for c in args.clients.split(",") if c]
    for path in filter(None, (args.daemon, args.go_client, args.calibration)):
        if not os.access(path, os.X_OK):
            sys.exit(f"go_ratio: {path}: not an executable")

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start = load_average()
    runs = []
    for rep in range(args.reps):
        servers = [run_sliced]
        if args.calibration:
            # Alternate which server meets the machine first.
            servers = [run_sliced, run_calibration][::1 if rep % 2 == 0 else -1]
        for run in servers:
            runs += [dict(r, rep=rep) for r in run(args, rep)]
    load_end = load_average()

    md = render(args, runs, load_start, load_end, started)
    write_results(args.out_dir, "go",
                  {"fleet_nodes": args.fleet_nodes, "reps": args.reps,
                   "duration_s": args.duration, "warmup_s": args.warmup,
                   "runs": runs}, md)
    print(md)
    if args.check and any(r["calls"] == 0 or r["errors"] for r in runs):
        sys.exit("go_ratio: a phase made no progress or had errors")


if __name__ == "__main__":
    main()
