#!/usr/bin/env python3
"""Many node agents against one daemon: do they hold their leases, and what
does that cost the daemon?

    /usr/bin/python3 bench/agents.py [--agents 1000] [--duration 60] [--record]

Starts the daemon (build/server/sliced, a temp data dir, 127.0.0.1) and one
process of simulated agents (python3 -m sliced_agent.sim: v6e 4x4 slices of
4 hosts, plus CPU nodes to make up the count; TPU metrics from one shared
fake device plugin, a log line per host every 5 s), waits until every node
is ALIVE, then measures for --duration seconds: heartbeats/s the daemon
answered (its sliced_rpcs_total), the daemon's CPU (utime+stime from
/proc/<pid>/stat) and RSS, the agents' process CPU, and how many nodes are
ALIVE at the end (must be all). --record appends the figures to
bench/RESULTS.md.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
from sliced_agent.sim import free_port  # noqa: E402  (client/python)
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def heartbeats(metrics_port):
    text = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        "http://127.0.0.1:%d/metrics" % metrics_port, timeout=10).read().decode()
    m = re.search(r'sliced_rpcs_total\{code="OK",method="/sliced.v1.Inventory/Heartbeat"\} '
                  r'(\S+)', text)
    return float(m.group(1)) if m else 0.0


def start_daemon(args, port, metrics_port, data):
    daemon = subprocess.Popen(
        [args.sliced, "--listen=127.0.0.1:%d" % port, "--metrics_listen=127.0.0.1:%d"
         % metrics_port, "--data_dir=" + data, "--heartbeat_timeout=%ds" % args.lease],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if "serving on" not in daemon.stdout.readline():
        raise SystemExit("the daemon did not start")
    return daemon


def measure_outage(args, procs, port, metrics_port, client):
    """SIGKILLs the daemon, restarts it after --outage s on the same port and
    data, and measures how the agents come back over the next 20 s: when the
    last agent logged "daemon answers again" (its first answered heartbeat),
    the busiest second of heartbeats, and the fewest nodes ALIVE."""
    procs[-1].kill()
    procs[-1].wait()
    time.sleep(args.outage)
    procs.append(start_daemon(args, port, metrics_port, args.data))
    restarted, t0, last, peak, min_alive = time.time(), time.monotonic(), 0.0, 0.0, args.agents
    while time.monotonic() - t0 < 20:
        time.sleep(1)
        now = heartbeats(metrics_port)
        peak, last = max(peak, now - last), now
        min_alive = min(min_alive, alive(client)[0])
    back = []
    with open(args.fleet_log) as f:
        for line in f:
            if "daemon answers again" in line:
                when = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + \
                    int(line[20:23]) / 1000
                if when >= restarted - 1:
                    back.append(when - restarted)
    return {"outage_s": args.outage, "agents_back": len(back),
            "last_agent_back_after_s": round(max(back), 1) if back else None,
            "median_agent_back_after_s": round(sorted(back)[len(back) // 2], 1) if back else None,
            "peak_heartbeats_per_s_after_restart": peak, "alive_min_after_restart": min_alive}


def alive(client):
    nodes = client.nodes()
    return sum(n.state == "ALIVE" for n in nodes), len(nodes)


def run(args):
    from sliced_client import Client
    tmp = tempfile.mkdtemp(prefix="sliced-bench-agents-")
    port, metrics_port = free_port(), free_port()
    args.data = os.path.join(tmp, "data")
    args.fleet_log = os.path.join(tmp, "fleet.log")
    daemon = start_daemon(args, port, metrics_port, args.data)
    procs = [daemon]
    try:
        slices, cpu = args.agents // 4, args.agents % 4
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"),
                   SLICED_PY=os.environ.get("SLICED_PY", os.path.join(REPO, "build", "python")))
        fleet = subprocess.Popen(
            [sys.executable, "-m", "sliced_agent.sim", "--server", "127.0.0.1:%d" % port,
             "--slices", "v6e:4x4:%d" % slices if slices else "", "--cpu_nodes", str(cpu),
             "--source", "device-plugin", "--shared_plugin", "--log_rate", "0.2",
             "--workers", str(args.workers), "--dir", os.path.join(tmp, "hosts"), "--",
             "--metrics_interval", "10", "--health_interval", "10", "--log_interval", "2"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(args.fleet_log, "w"))
        procs.insert(0, fleet)
        client = Client("127.0.0.1:%d" % port, timeout=30)
        start = time.monotonic()
        while alive(client) != (args.agents, args.agents):
            if time.monotonic() - start > 300 or fleet.poll() is not None:
                raise SystemExit("not all agents came up: %r" % (alive(client),))
            time.sleep(1)
        ramp = time.monotonic() - start
        t0, hb0 = time.monotonic(), heartbeats(metrics_port)
        cpu0, fleet_cpu0 = cpu_seconds(daemon.pid), cpu_seconds(fleet.pid)
        min_alive = args.agents
        while time.monotonic() - t0 < args.duration:
            time.sleep(2)
            min_alive = min(min_alive, alive(client)[0])
        elapsed = time.monotonic() - t0
        result = {
            "agents": args.agents, "lease_s": args.lease, "duration_s": round(elapsed, 1),
            "ramp_s": round(ramp, 1), "alive_end": alive(client)[0], "alive_min": min_alive,
            "heartbeats_per_s": round((heartbeats(metrics_port) - hb0) / elapsed, 1),
            "daemon_cpu_pct": round(100 * (cpu_seconds(daemon.pid) - cpu0) / elapsed, 1),
            "daemon_rss_mib": round(rss_mib(daemon.pid), 1),
            "agents_cpu_pct": round(100 * (cpu_seconds(fleet.pid) - fleet_cpu0) / elapsed, 1),
            "agents_rss_mib": round(rss_mib(fleet.pid), 1),
        }
        if args.outage:
            result.update(measure_outage(args, procs, port, metrics_port, client))
        client.close()
        return result
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if os.environ.get("SLICED_BENCH_KEEP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def record(result, command):
    lines = [
        "", "## Node agents: %d simulated agents against one daemon%s (`bench/agents.py`)"
        % (result["agents"], ", and a daemon restart" if "outage_s" in result else ""), "",
        "`%s` on this machine (2 cores shared with other builds), %s. One process of "
        "simulated agents (sliced_agent.sim: v6e 4x4 slices, TPU metrics every 10 s from "
        "a shared fake device plugin, a libtpu log line per host every 5 s, health every "
        "10 s), lease %d s, so a heartbeat per agent every %.1f s."
        % (command, time.strftime("%Y-%m-%d"), result["lease_s"], result["lease_s"] / 3), "",
        "| agents | ALIVE at the end (min during) | heartbeats/s | daemon CPU | daemon RSS "
        "| agents' process CPU, RSS | all ALIVE after the start |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| %d | %d (%d) | %.1f | %.1f %% | %.1f MiB | %.1f %%, %.1f MiB | %.1f s |" % (
            result["agents"], result["alive_end"], result["alive_min"],
            result["heartbeats_per_s"], result["daemon_cpu_pct"], result["daemon_rss_mib"],
            result["agents_cpu_pct"], result["agents_rss_mib"], result["ramp_s"]), ""]
    if "outage_s" in result:
        lines += ["Then the daemon was SIGKILLed and restarted %.0f s later on the same data. "
                  "%d agents logged their first answered heartbeat after the restart, the "
                  "median %s s and the last %s s after it (full-jitter backoff, capped at a "
                  "quarter of the lease; gRPC reconnects within 4 s); the busiest second had %.0f heartbeats (steady: %.0f/s); "
                  "fewest nodes ALIVE in the 20 s after: %d. No manual step."
                  % (result["outage_s"], result["agents_back"],
                     result["median_agent_back_after_s"], result["last_agent_back_after_s"],
                     result["peak_heartbeats_per_s_after_restart"], result["heartbeats_per_s"],
                     result["alive_min_after_restart"]), ""]
    with open(os.path.join(REPO, "bench", "RESULTS.md"), "a") as f:
        f.write("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--duration", type=float, default=60)
    p.add_argument("--lease", type=int, default=10, help="the daemon's --heartbeat_timeout, s")
    p.add_argument("--workers", type=int, default=16, help="the fleet's Runner threads")
    p.add_argument("--sliced", default=os.environ.get(
        "SLICED_BIN", os.path.join(REPO, "build", "server", "sliced")))
    p.add_argument("--outage", type=float, default=0,
                   help="then kill the daemon for this many seconds and time the return")
    p.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = p.parse_args()
    result = run(args)
    for k, v in result.items():
        print("%-18s %s" % (k, v))
    if args.record:
        record(result, "/usr/bin/python3 bench/agents.py " + " ".join(sys.argv[1:]))
    return 0 if result["alive_end"] == args.agents else 1


if __name__ == "__main__":
    sys.exit(main())
