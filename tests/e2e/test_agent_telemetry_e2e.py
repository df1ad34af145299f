"""End to end: what the node agent ships. TPU metrics from a fake libtpu and
a fake GKE device plugin reach the daemon's /metrics with node and chip
labels; libtpu log lines written to files reach TailLogs (follow) in order
across rotation and partial writes; a daemon outage loses no line within the
agent's buffer and reports the lines dropped beyond it."""
import os
import re
import threading
import time
import unittest

from prometheus_client.parser import text_string_to_metric_families

from agent_testlib import Agent, base_dir, free_port, host, scrape, start_daemon, wait_until
from sliced_testlib import sliced_pb2, sliced_pb2_grpc, temp_data_dir

P = sliced_pb2
SERIES = ["sliced_tpu_tensorcore_utilization_percent", "sliced_tpu_duty_cycle_percent",
          "sliced_tpu_hbm_used_bytes", "sliced_tpu_hbm_total_bytes",
          "sliced_tpu_memory_bandwidth_utilization_percent"]


def tpu_series(metrics_port):
    """{(series, node, chip): value} of the daemon's TPU gauges."""
    out = {}
    for family in text_string_to_metric_families(scrape(metrics_port)):
        for s in family.samples:
            if s.name in SERIES:
                out[(s.name, s.labels["node"], s.labels["chip"])] = (s.value, s.labels)
    return out


def tail(port, node_id, follow=False, timeout=10):
    import grpc
    channel = grpc.insecure_channel("127.0.0.1:%d" % port)
    stream = sliced_pb2_grpc.TelemetryStub(channel).TailLogs(
        P.TailLogsRequest(node_id=node_id, follow=follow), timeout=timeout)
    return channel, stream


def texts(port, node_id):
    channel, stream = tail(port, node_id)
    with channel:
        return [(line.text.split("] ", 1)[-1], P.LogSeverity.Name(line.severity))
                for line in stream]


class AgentTelemetryEndToEnd(unittest.TestCase):
    def test_metrics_from_libtpu_and_the_device_plugin_reach_metrics(self):
        d = start_daemon(self, temp_data_dir(self))
        metrics_port = int(d.banner.split("metrics on port ")[1])
        base = base_dir(self)
        server = "127.0.0.1:%d" % d.port
        for w, source in enumerate(["libtpu", "device-plugin"]):
            h = host(self, base, "sim-v4-0-w%d" % w, "v4", "2x2x2", "sim-v4-0", w,
                     source=source)
            Agent(self, server, h).wait_for("TPU metrics from %s \\(4 chips\\)" % source)
        expected = {(s, "sim-v4-0-w%d" % w, str(c)) for s in SERIES for w in range(2)
                    for c in range(4)}
        # Reports come every 0.5 s and announce nothing on the daemon: polled.
        got = wait_until(lambda: (lambda g: expected <= set(g) and g)(tpu_series(metrics_port)),
                         20, "every chip's five series on /metrics")
        for (name, node, chip), (value, labels) in got.items():
            self.assertEqual((labels["slice"], labels["accelerator_type"]),
                             ("sim-v4-0", "TPU-V4"))
            if name == "sliced_tpu_hbm_total_bytes":
                self.assertEqual(value, 32 << 30)
            elif name.endswith("_percent"):
                self.assertTrue(0 <= value <= 100, (name, node, chip, value))

    def test_log_lines_reach_taillogs_in_order_across_rotation(self):
        d = start_daemon(self, temp_data_dir(self))
        h = host(self, base_dir(self), "sim-v6e-0-w0", "v6e", "2x2", "sim-v6e-0", 0)
        agent = Agent(self, "127.0.0.1:%d" % d.port, h)
        agent.wait_for("registered")
        channel, stream = tail(d.port, h.name, follow=True, timeout=60)
        self.addCleanup(channel.close)
        received, done = [], threading.Event()

        def read():
            for line in stream:
                received.append((line.text.split("] ", 1)[-1],
                                 P.LogSeverity.Name(line.severity)))
                if received[-1][0] == "line 59":
                    done.set()
                    return
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        h.write_log("ready")
        wait_until(lambda: received, 20, "the first line through TailLogs")
        path = os.path.join(h.log_dir, "libtpu.log")
        for i in range(60):
            if i in (20, 45):  # rotation: the old file renamed, a new one started
                os.replace(path, path + ".%d" % i)
            if i == 30:  # a partial write the agent sees before its end
                with open(path, "a") as f:
                    f.write("W1123 04:00:00.000000 1 a.cc:1] line ")
                time.sleep(0.5)
                with open(path, "a") as f:
                    f.write("30\n")
                continue
            h.write_log("line %d" % i, "E" if i == 50 else "I")
        self.assertTrue(done.wait(20), received)
        stream.cancel()
        self.assertEqual(received, [("ready", "INFO")] + [
            ("line %d" % i, {30: "WARNING", 50: "ERROR"}.get(i, "INFO")) for i in range(60)])

    def test_an_outage_loses_nothing_within_the_buffer_and_reports_drops(self):
        data = temp_data_dir(self)
        d = start_daemon(self, data)
        h = host(self, base_dir(self), "sim-v6e-0-w0", "v6e", "2x2", "sim-v6e-0", 0)
        agent_metrics = free_port()
        agent = Agent(self, "127.0.0.1:%d" % d.port, h, "--log_buffer_lines", "40",
                      "--metrics_port", str(agent_metrics))
        agent.wait_for("registered")
        h.write_log("before")
        wait_until(lambda: ("before", "INFO") in texts(d.port, h.name), 20, "the first line")

        def buffered(lines, dropped):
            text = scrape(agent_metrics)
            return (re.search(r"^sliced_agent_log_buffer_lines %d\.0$" % lines, text, re.M)
                    and re.search(r"^sliced_agent_log_lines_dropped_total %d\.0$" % dropped,
                                  text, re.M))
        # Outage 0 lasts 30 s (the figure: the agent's reconnect and
        # heartbeat backoff must come back after it) and fits the buffer;
        # outage 1 overflows it.
        for outage, (count, kept, seconds) in enumerate([(30, 30, 30), (100, 40, 0)]):
            d.kill9()
            down = time.monotonic()
            for i in range(count):
                h.write_log("outage %d line %d" % (outage, i))
            # The agent has read them all into its buffer (its own gauges say so).
            wait_until(lambda: buffered(kept, 60 if outage else 0), 20,
                       "%d lines buffered" % kept)
            time.sleep(max(0.0, seconds - (time.monotonic() - down)))  # the outage itself
            d = start_daemon(self, data, d.port)
            last = ("outage %d line %d" % (outage, count - 1), "INFO")
            got = wait_until(lambda: (lambda t: last in t and t)(texts(d.port, h.name)), 20,
                             "the outage's lines after the restart")
            mine = [t for t in got if t[0].startswith("outage %d " % outage)
                    or "dropped" in t[0]]
            lost = count - kept
            self.assertEqual(mine, ([("sliced-agent: dropped %d log lines (buffer of 40 full "
                                      "while the daemon was unreachable)" % lost, "WARNING")]
                                    if lost else []) +
                             [("outage %d line %d" % (outage, i), "INFO")
                              for i in range(lost, count)])
        self.assertIn("dropped 60 log lines (buffer of 40 full)", agent.text())


if __name__ == "__main__":
    unittest.main()
