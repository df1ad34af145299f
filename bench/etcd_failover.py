#!/usr/bin/env python3
"""Failover time at scale on the etcd store (issue 19, docs/ha.md): how long
after the leader's kill -9 a standby leads, with and without the hot standby.

    /usr/bin/python3 bench/etcd_failover.py [--nodes 100000] [--rounds 3]
        [--build build] [--lease-ttl 5s]

One etcd member on loopback in a temp dir (--max-txn-ops 4096
--max-request-bytes 10485760, sliced told the same), then for each mode —
`--etcd_hot_standby=false` (the standby reads everything from etcd when it
wins) and `--etcd_hot_standby=true` (it keeps a copy, tailed with a watch) —
on a cluster prefix of its own:
  - two daemons (leases of --lease-ttl, heartbeats off), the first leads;
  - `sliced_gen --what=fleet --nodes N --seed 1` registered through the
    leader in batches of 1,000;
  - --rounds times: wait until the standby is ready (hot: its /metrics says
    its copy holds every node and its watch is open; cold: 2 s), kill -9 the
    leader, and time from the kill to the standby's `leading` line; the line
    also says how long the new leader took from winning to serving ("loaded
    in", which includes restoring the state) and from what. The killed
    daemon comes back as the standby.
Also reads both daemons' resident memory (process_resident_memory_bytes on
their /metrics) just before the first kill: the standby's shows what its
copy costs. Prints a Markdown table (medians and every round).
"""
import argparse
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
from sliced_agent.sim import free_port  # noqa: E402  (client/python)


class Daemon:
    def __init__(self, binary, endpoints, cluster, ttl, root):
        self.binary, self.endpoints, self.cluster, self.ttl, self.root = (
            binary, endpoints, cluster, ttl, root)
        self.port, self.http = free_port(), free_port()
        self.proc = None

    def start(self, hot):
        self.lines = queue.Queue()
        self.proc = subprocess.Popen(
            [self.binary, "--store=etcd", "--etcd_endpoints=" + self.endpoints,
             "--etcd_cluster=" + self.cluster, "--listen=127.0.0.1:%d" % self.port,
             "--metrics_listen=127.0.0.1:%d" % self.http, "--heartbeat_timeout=0",
             "--etcd_lease_ttl=" + self.ttl, "--etcd_max_txn_ops=4096",
             "--etcd_max_request_bytes=10485760", "--log_level=error",
             "--etcd_hot_standby=%s" % ("true" if hot else "false")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        proc, lines = self.proc, self.lines
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout],
                         daemon=True).start()
        return self

    def wait_line(self, text, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.01)
            except queue.Empty:
                continue
            if text in line:
                return time.monotonic(), line
        raise SystemExit("%s printed no %r in %ds" % (self.port, text, timeout))

    def metrics(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.http,
                                        timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--lease-ttl", default="5s")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import grpc
    from google.protobuf import json_format
    from sliced.v1 import sliced_pb2 as P, sliced_pb2_grpc as G

    work = tempfile.mkdtemp(prefix="sliced-failover-bench-")
    fleet = subprocess.run([os.path.join(args.build, "bench", "sliced_gen"), "--what=fleet",
                            "--nodes=%d" % args.nodes, "--seed=1"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    ec, ep = free_port(), free_port()
    etcd_log = open(os.path.join(work, "etcd.log"), "w")
    etcd = subprocess.Popen(
        ["etcd", "--name=b", "--data-dir=" + os.path.join(work, "etcd"),
         "--listen-client-urls=http://127.0.0.1:%d" % ec,
         "--advertise-client-urls=http://127.0.0.1:%d" % ec,
         "--listen-peer-urls=http://127.0.0.1:%d" % ep,
         "--initial-advertise-peer-urls=http://127.0.0.1:%d" % ep,
         "--initial-cluster=b=http://127.0.0.1:%d" % ep,
         "--max-txn-ops=4096", "--max-request-bytes=10485760"],
        stdout=etcd_log, stderr=etcd_log)
    binary = os.path.join(args.build, "server", "sliced")
    daemons = []
    rows = []
    try:
        for hot in (False, True):
            mode = "hot standby" if hot else "read on winning"
            cluster = "bench-hot" if hot else "bench-cold"
            pair = [Daemon(binary, "127.0.0.1:%d" % ec, cluster, args.lease_ttl, work)
                    for _ in range(2)]
            daemons += pair
            leader, standby = pair
            leader.start(hot).wait_line("leading")
            standby.start(hot).wait_line("standby on")
            channel = grpc.insecure_channel("127.0.0.1:%d" % leader.port)
            inventory = G.InventoryStub(channel)
            t = time.monotonic()
            for i in range(0, len(fleet), 1000):
                request = P.RegisterNodesRequest()
                for line in fleet[i:i + 1000]:
                    json_format.Parse(line, request.nodes.add())
                inventory.RegisterNodes(request, timeout=300)
            channel.close()
            print("%s: %d nodes registered in %.1f s" % (mode, len(fleet), time.monotonic() - t),
                  flush=True)
            takeovers, loads, rss = [], [], None
            for r in range(args.rounds):
                deadline = time.monotonic() + 300
                if hot:
                    while True:
                        m = standby.metrics()
                        if (m.get("sliced_ha_standby_records", 0) >= len(fleet)
                                and m.get("sliced_ha_standby_watching") == 1):
                            break
                        if time.monotonic() > deadline:
                            raise SystemExit("the standby's copy did not fill: %r" % m)
                        time.sleep(0.2)
                else:
                    time.sleep(2)
                if rss is None:
                    rss = (leader.metrics().get("process_resident_memory_bytes", 0) / 2**20,
                           standby.metrics().get("process_resident_memory_bytes", 0) / 2**20)
                t0 = time.monotonic()
                leader.kill()
                t1, line = standby.wait_line("leading")
                loaded = re.search(r"loaded in ([0-9.]+)(m?s) from (.*), metrics", line)
                seconds = float(loaded.group(1)) / (1000 if loaded.group(2) == "ms" else 1)
                takeovers.append(t1 - t0)
                loads.append(seconds)
                print("%s round %d: led %.2f s after the kill; loaded in %.3f s from %s"
                      % (mode, r + 1, t1 - t0, seconds, loaded.group(3)), flush=True)
                leader.start(hot).wait_line("standby on")
                leader, standby = standby, leader
            rows.append((mode, takeovers, loads, rss))
            for d in pair:
                d.kill()
    finally:
        for d in daemons:
            d.kill()
        etcd.kill()
        etcd.wait()
        etcd_log.close()
        shutil.rmtree(work, ignore_errors=True)

    print()
    print("`bench/etcd_failover.py --nodes %d --rounds %d --lease-ttl %s`, %s, load %s"
          % (args.nodes, args.rounds, args.lease_ttl,
             time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             " ".join(open("/proc/loadavg").read().split()[:3])))
    print()
    print("| standby | kill -9 → new leader serving, median (each round) | "
          "won → serving (\"loaded in\"), median (each round) | RSS before the first kill: "
          "leader, standby |")
    print("| --- | --- | --- | --- |")
    for mode, takeovers, loads, rss in rows:
        print("| %s | %.2f s (%s) | %.3f s (%s) | %.0f MiB, %.0f MiB |" % (
            mode, statistics.median(takeovers), ", ".join("%.2f" % x for x in takeovers),
            statistics.median(loads), ", ".join("%.3f" % x for x in loads), rss[0], rss[1]))


if __name__ == "__main__":
    main()
