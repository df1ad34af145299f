#!/usr/bin/env python3
"""The web view at scale: /api/v1 latencies and sizes, and the page in
headless Chromium, on a daemon holding a generated fleet.

    /usr/bin/python3 bench/web_ui.py [--nodes 100000] [--groups 5000] [--reps 20]

Starts the daemon (build/server/sliced, leases off, a temp data dir,
127.0.0.1), registers `sliced_gen --what=fleet --nodes N --seed 1` in
batches of 1,000, places --groups whole-slice groups of the fleet's most
common multi-host shape plus 200 that must wait (so the map has held slices
and the queue has a page of reasons), then measures:
  - each API endpoint: median and p95 wall time over --reps calls, body
    bytes, and gzip'd bytes (what a browser transfers);
  - the page in Chromium (tests/e2e/cdp.py): time from navigation to the
    first complete render, one poll cycle (every 3 s), the DOM size and the
    JS heap, before and after drilling into the largest slice group (one
    page of 50 slices) and opening a host;
  - the daemon's RSS and its CPU over 30 s of the page polling.
Prints a Markdown block for bench/RESULTS.md.
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
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from agents import cpu_seconds, free_port, rss_mib  # noqa: E402  (bench/agents.py)
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch(url, gzip_ok=False):
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    t = time.perf_counter()
    with OPENER.open(req, timeout=60) as r:
        body = r.read()
    return time.perf_counter() - t, body


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=100000)
    p.add_argument("--groups", type=int, default=5000)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--screenshot", default="", help="save the drilled-down page here")
    args = p.parse_args()
    os.environ.setdefault("SLICED_PY", os.path.join(args.build, "python"))
    sys.path.insert(0, os.environ["SLICED_PY"])
    import grpc
    from google.protobuf import json_format
    from sliced.v1 import sliced_pb2 as P, sliced_pb2_grpc as G
    from cdp import Browser

    work = tempfile.mkdtemp(prefix="sliced-web-bench-")
    fleet = subprocess.run([os.path.join(args.build, "bench", "sliced_gen"), "--what=fleet",
                            "--nodes=%d" % args.nodes, "--seed=1"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    port, http = free_port(), free_port()
    daemon = subprocess.Popen(
        [os.path.join(args.build, "server", "sliced"), "--listen=127.0.0.1:%d" % port,
         "--metrics_listen=127.0.0.1:%d" % http, "--data_dir=" + os.path.join(work, "data"),
         "--heartbeat_timeout=0", "--log_level=error"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    browser = None
    try:
        daemon.stdout.readline()
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        inventory, placement = G.InventoryStub(channel), G.PlacementStub(channel)
        t = time.perf_counter()
        pending = []
        for i in range(0, len(fleet), 1000):
            request = P.RegisterNodesRequest()
            for line in fleet[i:i + 1000]:
                json_format.Parse(line, request.nodes.add())
            pending.append(inventory.RegisterNodes.future(request, timeout=300))
            if len(pending) >= 4:
                pending.pop(0).result()
        for f in pending:
            f.result()
        register_s = time.perf_counter() - t
        base = "http://127.0.0.1:%d" % http
        groups = json.loads(fetch(base + "/api/v1/slice_groups")[1])["groups"]
        shapes = {}
        for g in groups:
            if int(g.get("hosts_per_slice", "0")) > 1:
                key = (g["accelerator_type"], g["topology"])
                shapes[key] = shapes.get(key, 0) + int(g.get("total_slices", "0"))
        (accel, topo), count = max(shapes.items(), key=lambda kv: kv[1])
        t = time.perf_counter()
        futures = []
        wanted = min(args.groups, count) + 200
        for i in range(wanted):
            futures.append(placement.CreatePlacementGroup.future(P.CreatePlacementGroupRequest(
                slice=P.SliceRequirement(accelerator_type=accel, topology=topo),
                job_id="job-%d" % (i % 97)), timeout=120))
            if len(futures) >= 64:
                futures.pop(0).result()
        for f in futures:
            f.result()
        create_s = time.perf_counter() - t

        # The API.
        big = max(groups, key=lambda g: int(g.get("total_slices", "0")))
        q = "accelerator_type=%s&topology=%s&tier=%s&zone=%s" % (
            big["accelerator_type"], big["topology"], big.get("tier", ""), big.get("zone", ""))
        held = json.loads(fetch(base + "/api/v1/slices?status=held&page_size=1")[1])
        node = held["slices"][0]["hosts"][0]["node_id"]
        pg = held["slices"][0]["hosts"][0]["placement_group_ids"][0]
        endpoints = [
            ("summary", "/api/v1/summary"),
            ("slice_groups (every shape x tier x zone)", "/api/v1/slice_groups"),
            ("slices: one group, page of 50", "/api/v1/slices?" + q + "&page_size=50"),
            ("slices: all, page of 500", "/api/v1/slices?page_size=500"),
            ("queue: page of 50 (as the page asks)", "/api/v1/queue?page_size=50"),
            ("queue: page of 50, explain=true", "/api/v1/queue?page_size=50&explain=true"),
            ("placement_groups/<id>", "/api/v1/placement_groups/" + pg),
            ("nodes/<id>", "/api/v1/nodes/" + node),
            ("/metrics", "/metrics"),
        ]
        rows = []
        for name, path in endpoints:
            times = []
            for _ in range(args.reps):
                # summary and slice_groups are cached for 2 s: defeat it by
                # waiting it out, so this times the computation.
                if "summary" in path or "slice_groups" in path:
                    time.sleep(2.05)
                dt, body = fetch(base + path)
                times.append(dt * 1000)
            _, zipped = fetch(base + path, gzip_ok=True)
            times.sort()
            rows.append((name, statistics.median(times), times[int(0.95 * (len(times) - 1))],
                         len(body), len(zipped)))

        # The page.
        browser = Browser(1400, 1000)
        t = time.perf_counter()
        browser.navigate(base + "/ui")
        browser.wait_for("document.getElementById('conn').dataset.state === 'live' && "
                         "document.querySelectorAll('#slice-groups tbody tr.row').length > 0",
                         timeout=120, what="first render")
        first_render_s = time.perf_counter() - t
        page = {}

        def measure(label):
            poll_ms = browser.evaluate(
                "(async () => { while (state.polling) await new Promise(r => setTimeout(r, 20)); "
                "const t = performance.now(); await poll(); return performance.now() - t; })()")
            dom = browser.evaluate("document.getElementsByTagName('*').length")
            cells = browser.evaluate("document.querySelectorAll('.slice .cell').length")
            heap = browser.call("Runtime.getHeapUsage")
            page[label] = (poll_ms, dom, cells, heap["usedSize"] / 2**20)

        measure("aggregate rows only")
        key = "|".join([big["accelerator_type"], big["topology"], big.get("tier", ""), big.get("zone", "")])
        t = time.perf_counter()
        browser.evaluate("document.querySelector('tr[data-group=\"%s\"]').click()" % key)
        browser.wait_for("document.querySelectorAll('[data-drill=\"%s\"] .slice').length > 0" % key,
                         timeout=60, what="the drill-down")
        drill_s = time.perf_counter() - t
        measure("one group open (50 slices)")
        browser.evaluate("document.querySelector('.slice .cell[data-node]').click()")
        browser.wait_for("!document.getElementById('detail').hidden", timeout=30, what="host panel")
        measure("and a host's panel")
        if args.screenshot:
            browser.screenshot(args.screenshot, full_page=False)

        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        time.sleep(30)
        daemon_cpu = (cpu_seconds(daemon.pid) - cpu0) / (time.monotonic() - t0)
        rss = rss_mib(daemon.pid)
    finally:
        if browser:
            browser.close()
        daemon.terminate()
        daemon.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)

    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()
    print("### Web view at %d nodes (%d groups asking one %s %s slice each: all but 200 placed)\n"
          % (args.nodes, wanted, accel, topo))
    print("**Command**: `/usr/bin/python3 bench/web_ui.py --nodes %d --groups %d --reps %d` "
          "(RelWithDebInfo build) at commit `%s`, load average %.1f / %.1f / %.1f. "
          "Registering the fleet took %.1f s, creating the groups %.1f s.\n"
          % (args.nodes, args.groups, args.reps, commit, *load, register_s, create_s))
    print("| endpoint | median ms | p95 ms | bytes | gzip bytes |")
    print("| --- | --- | --- | --- | --- |")
    for name, med, p95, size, zsize in rows:
        print("| %s | %.1f | %.1f | %s | %s |" % (name, med, p95, format(size, ","), format(zsize, ",")))
    print("\nThe page in headless Chromium: first complete render %.2f s after navigation; "
          "drilling into the largest group (%s slices) %.2f s.\n"
          % (first_render_s, big.get("total_slices"), drill_s))
    print("| page state | one poll cycle ms | DOM elements | host cells | JS heap MiB |")
    print("| --- | --- | --- | --- | --- |")
    for label, (poll_ms, dom, cells, heap) in page.items():
        print("| %s | %.0f | %s | %s | %.1f |" % (label, poll_ms, format(dom, ","), cells, heap))
    print("\nDaemon while the page polls (every 3 s, a host panel open): %.1f %% of a core, "
          "RSS %.0f MiB." % (100 * daemon_cpu, rss))


if __name__ == "__main__":
    main()
