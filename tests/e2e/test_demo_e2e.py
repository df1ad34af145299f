"""End to end: scripts/demo.sh (the README's demo) starts the daemon and a
simulated fleet that stays ALIVE, shows TPU series on /metrics and libtpu
lines in TailLogs, runs the README's example, and stops on SIGTERM."""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from agent_testlib import free_port, node_states, scrape, wait_states, wait_until
from sliced_testlib import REPO, lost_its_port, sliced_pb2, sliced_pb2_grpc

NODES = ["sim-cpu-0", "sim-cpu-1", "sim-v4-0-w0", "sim-v4-0-w1"] + [
    "sim-v6e-0-w%d" % w for w in range(4)]


class DemoEndToEnd(unittest.TestCase):
    def start_demo(self, tmp, attempt, port, metrics):
        """Starts scripts/demo.sh; returns it, its stderr file and its first
        lines (the daemon's banner, then its own; up to "demo: daemon on" or
        its exit)."""
        env = dict(os.environ, SLICED_DEMO_SKIP_BUILD="1", SLICED_LISTEN="127.0.0.1:%d" % port,
                   SLICED_METRICS_LISTEN="127.0.0.1:%d" % metrics,
                   SLICED_DEMO_DATA=os.path.join(tmp, "data-%d" % attempt))
        # The demo's stderr (daemon and fleet logs) is kept to say which process
        # hung if the demo does not stop.
        stderr = open(os.path.join(tmp, "demo-%d.stderr" % attempt), "w+")
        self.addCleanup(stderr.close)
        demo = subprocess.Popen([os.path.join(REPO, "scripts", "demo.sh"),
                                 "--heartbeat_timeout=2s"], env=env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=stderr, text=True,
                                start_new_session=True)
        self.addCleanup(demo.stdout.close)
        self.addCleanup(lambda: demo.poll() is None and os.killpg(demo.pid, signal.SIGKILL))
        first = []
        while len(first) < 6 and not first[-1:] == [""] and not any(
                line.startswith("demo: daemon on") for line in first):
            first.append(demo.stdout.readline())
        return demo, stderr, first

    def test_demo_fleet_is_alive_and_live(self):
        tmp = tempfile.TemporaryDirectory(prefix="sliced-demo-")
        self.addCleanup(tmp.cleanup)
        # A port taken before the daemon bound it stops the demo, saying so
        # (lost_its_port): it runs again on new ports (three tries).
        for attempt in range(3):
            port, metrics = free_port(), free_port()
            demo, stderr, first = self.start_demo(tmp.name, attempt, port, metrics)
            if any(line.startswith("demo: daemon on") for line in first) or attempt == 2:
                break
            stderr.seek(0)
            if not lost_its_port(stderr.read()):
                break
        self.assertTrue(any(line.startswith("demo: daemon on") for line in first), first)
        wait_states(port, dict.fromkeys(NODES, "ALIVE"), timeout=30)
        end = time.monotonic() + 5  # past two leases: still all ALIVE
        while time.monotonic() < end:
            self.assertEqual(set(node_states(port).values()), {"ALIVE"})
            time.sleep(0.25)
        out = subprocess.run([sys.executable, os.path.join(REPO, "examples",
                                                           "jaxtrainer_example.py"),
                              "--address", "127.0.0.1:%d" % port, "--timeout", "30"],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "client",
                                                                         "python")))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("is CREATED on slice(s) sim-v6e-0", out.stdout)
        text = wait_until(lambda: (lambda t: 'node="sim-v4-0-w1"' in t and
                                   'node="sim-v6e-0-w3"' in t and t)(scrape(metrics)), 30,
                          "TPU series of both slices")
        self.assertRegex(text, r'sliced_tpu_duty_cycle_percent\{node="sim-v6e-0-w0",'
                               r'slice="sim-v6e-0",accelerator_type="TPU-V6E",chip="3"\}')
        import grpc
        with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
            stub = sliced_pb2_grpc.TelemetryStub(ch)
            lines = wait_until(lambda: list(stub.TailLogs(sliced_pb2.TailLogsRequest(
                slice_name="sim-v6e-0"), timeout=10)), 20, "libtpu lines of the v6e slice")
        self.assertRegex(lines[0].text, r"^[IW]\d{4} .*\] step \d+: ")
        os.killpg(demo.pid, signal.SIGTERM)
        try:
            rc = demo.wait(timeout=30)
        except subprocess.TimeoutExpired:
            alive = subprocess.run(["ps", "-o", "pid,stat,etime,args", "-s", str(demo.pid)],
                                   capture_output=True, text=True).stdout
            stderr.seek(0)
            self.fail("demo.sh did not exit within 30 s of SIGTERM; its session still has:\n"
                      "%s\nits stderr, last 3000 characters:\n%s" % (alive, stderr.read()[-3000:]))
        self.assertEqual(rc, 0)
        with self.assertRaises(Exception):  # the daemon went with it
            node_states(port)


if __name__ == "__main__":
    unittest.main()
