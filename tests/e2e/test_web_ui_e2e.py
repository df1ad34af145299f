"""End to end in a real browser: the daemon with the demo's simulated fleet
(sliced_agent.sim: a v6e 4x4 slice, a v4 2x2x2, 2 CPU nodes, live TPU
metrics and libtpu lines), and headless Chromium (Debian's `chromium`,
driven over its DevTools protocol by tests/e2e/cdp.py) on /ui. Asserts what
a user sees: the slices' hosts and states, a live change when a group is
created (no reload), a pending group's reason in the queue, a host's TPU
series and a group's workers, and "disconnected" when the daemon goes.
Screenshots are kept under $SLICED_ARTIFACTS/web_ui (the build dir's
test-artifacts/ under ctest)."""
import os
import signal
import subprocess
import sys
import tempfile
import unittest


from agent_testlib import CLIENT_DIR, wait_states
from cdp import Browser, chromium_binary
from sliced_testlib import Daemon, sliced_pb2, sliced_pb2_grpc, temp_data_dir

V6E = ["sim-v6e-0-w%d" % w for w in range(4)]
V4 = ["sim-v4-0-w0", "sim-v4-0-w1"]
ARTIFACTS = os.path.join(os.environ.get("SLICED_ARTIFACTS") or tempfile.gettempdir(), "web_ui")


def cells(slice_name):
    """JS: the host cells of one slice card as [node, state, pgs]."""
    return ("Array.from(document.querySelectorAll('[data-slice=\"%s\"] .cell'))"
            ".map(c => [c.dataset.node, c.dataset.state, c.dataset.pg])" % slice_name)


@unittest.skipIf(chromium_binary() is None, "chromium not installed (scripts/install-deps.sh)")
class WebUiEndToEnd(unittest.TestCase):
    def setUp(self):
        os.makedirs(ARTIFACTS, exist_ok=True)
        self.daemon = Daemon(temp_data_dir(self), "--heartbeat_timeout=2s").start()
        self.addCleanup(self.daemon.close)
        self.http = int(self.daemon.banner.split("metrics on port ")[1])
        self.fleet = subprocess.Popen(
            [sys.executable, "-m", "sliced_agent.sim", "--server", "127.0.0.1:%d" % self.daemon.port,
             "--slices", "v6e:4x4:1,v4:2x2x2:1", "--cpu_nodes", "2", "--log_rate", "4",
             "--", "--metrics_interval", "0.5", "--log_interval", "0.2"],
            env=dict(os.environ, PYTHONPATH=CLIENT_DIR), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        self.addCleanup(self.stop_fleet)
        wait_states(self.daemon.port, dict.fromkeys(V6E + V4, "ALIVE"), timeout=30,
                    what="the simulated fleet ALIVE")
        self.browser = Browser()
        self.addCleanup(self.browser.close)

    def stop_fleet(self):
        if self.fleet.poll() is None:
            self.fleet.send_signal(signal.SIGTERM)
            try:
                self.fleet.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.fleet.kill()
                self.fleet.wait()

    def shot(self, name):
        return self.browser.screenshot(os.path.join(ARTIFACTS, name + ".png"))

    def submit(self, job_id):
        with self.daemon.channel() as ch:
            return sliced_pb2_grpc.PlacementStub(ch).SubmitScalingConfig(
                sliced_pb2.SubmitScalingConfigRequest(
                    scaling_config=sliced_pb2.ScalingConfig(
                        num_workers=4, use_tpu=True, topology="4x4", accelerator_type="TPU-V6E"),
                    job_id=job_id), timeout=10)

    def test_the_page_shows_the_fleet_the_queue_and_live_changes(self):
        b = self.browser
        b.navigate("http://127.0.0.1:%d/ui" % self.http)
        b.wait_for("document.getElementById('conn').dataset.state === 'live'", what="live")

        # The slice map: both slices as host grids, every host free.
        got = b.wait_for("(c => c.length === 4 && c.every(x => x[1] === 'free') && c)(%s)"
                         % cells("sim-v6e-0"), what="sim-v6e-0's four free hosts")
        self.assertEqual(sorted(c[0] for c in got), V6E)
        got = b.wait_for("(c => c.length === 2 && c)(%s)" % cells("sim-v4-0"), what="sim-v4-0")
        self.assertEqual(sorted(c[0] for c in got), V4)
        groups = b.evaluate("Array.from(document.querySelectorAll('#slice-groups tbody tr.row'))"
                            ".map(r => r.innerText)")
        self.assertTrue(any("TPU-V6E" in g and "4x4" in g and "v6e-16" in g for g in groups), groups)
        self.assertEqual(b.evaluate("document.querySelectorAll('.slice .cell.missing').length"), 0)
        self.shot("1-fleet")

        # A group is created: the page turns the slice's hosts to held by it,
        # without a reload.
        b.evaluate("window.__marker = 'same page'")
        pg = self.submit("job-1")
        self.assertEqual(pg.state, sliced_pb2.CREATED)
        got = b.wait_for("(c => c.every(x => x[1] === 'held') && c)(%s)" % cells("sim-v6e-0"),
                         what="sim-v6e-0 held after the create")
        self.assertEqual({c[2] for c in got}, {pg.placement_group_id})
        self.assertEqual(b.evaluate("window.__marker"), "same page")
        self.assertIn("job-1", b.evaluate(
            "document.querySelector('[data-slice=\"sim-v6e-0\"] .holders').innerText"))

        # A second one waits: the queue shows it with why.
        pending = self.submit("job-2")
        self.assertEqual(pending.state, sliced_pb2.PENDING)
        row = b.wait_for("(r => r && r.innerText)(document.querySelector('#queue tr[data-pg=\"%s\"]'))"
                         % pending.placement_group_id, what="the pending group in the queue")
        self.assertIn("job-2", row)
        self.assertIn("PENDING", row)
        self.assertIn(pending.pending_reason, row)
        self.assertRegex(pending.pending_reason, r"slices free")

        # A drained host turns DRAINING on the map.
        with self.daemon.channel() as ch:
            sliced_pb2_grpc.InventoryStub(ch).DrainNode(
                sliced_pb2.DrainNodeRequest(node_id="sim-v4-0-w1"), timeout=10)
        b.wait_for("(c => c.some(x => x[0] === 'sim-v4-0-w1' && x[1] === 'draining'))(%s)"
                   % cells("sim-v4-0"), what="sim-v4-0-w1 draining")
        self.assertEqual(b.evaluate(
            "document.querySelector('[data-slice=\"sim-v4-0\"]').dataset.status"), "broken")
        self.shot("2-held-and-queue")

        # A host: its TPU series (a few reports in) and libtpu lines.
        b.evaluate("document.querySelector('.cell[data-node=\"sim-v6e-0-w0\"]').click()")
        b.wait_for("(p => !p.hidden && p.dataset.id === 'sim-v6e-0-w0')(document.getElementById('detail'))",
                   what="the host's panel")
        n = b.wait_for("(s => s.length >= 3 && s.length)(document.querySelectorAll("
                       "'[data-telemetry=\"sim-v6e-0-w0\"] [data-series=duty_cycle] polyline'))",
                       what="the duty-cycle series of every chip")
        self.assertGreaterEqual(n, 4)  # 4 chips on a v6e host
        series = b.evaluate("document.querySelector('[data-series=duty_cycle] polyline')"
                            ".getAttribute('points').split(' ').length")
        self.assertGreaterEqual(series, 2)
        b.wait_for("document.querySelector('#detail pre.logs') !== null", what="libtpu lines")
        self.shot("3-host-telemetry")

        # The pending group: Explain, and the created one: its workers.
        b.evaluate("document.querySelector('#queue tr[data-pg=\"%s\"]').click()"
                   % pending.placement_group_id)
        text = b.wait_for("(p => p.dataset.id === '%s' && p.innerText)(document.getElementById('detail'))"
                          % pending.placement_group_id, what="the pending group's panel")
        self.assertIn("explain: UNSCHEDULABLE", text)
        b.evaluate("document.querySelector('[data-slice=\"sim-v6e-0\"] .holders button').click()")
        text = b.wait_for("(p => p.dataset.id === '%s' && p.querySelectorAll('[data-worker]').length === 4"
                          " && p.innerText)(document.getElementById('detail'))" % pg.placement_group_id,
                          what="the created group's 4 workers")
        for node in V6E:
            self.assertIn(node, text)
        self.shot("4-group-workers")

        # The daemon goes away: the page says so.
        self.stop_fleet()
        self.daemon.close()
        b.wait_for("document.getElementById('conn').dataset.state === 'disconnected'",
                   what="disconnected", timeout=15)
        self.assertTrue(b.evaluate("document.body.classList.contains('stale')"))
        self.shot("5-disconnected")


if __name__ == "__main__":
    unittest.main()
