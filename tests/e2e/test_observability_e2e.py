"""End to end: /metrics (checked by the real promtool), TPU telemetry, libtpu
logs, and the cluster summary, on the real daemon."""
import shutil
import subprocess
import unittest
import urllib.request

import grpc

from sliced_testlib import (Daemon, first_event_then, sliced_pb2, sliced_pb2_grpc,
                            temp_data_dir, wait_until)
from test_placement_e2e import SEED, cpu_node, tpu_slice

P = sliced_pb2


class ObservabilityEndToEnd(unittest.TestCase):
    def start(self, data=None, *args):
        d = Daemon(data or temp_data_dir(self), "--heartbeat_timeout=0", *args).start()
        self.addCleanup(d.close)
        ch = d.channel()
        self.addCleanup(ch.close)
        self.metrics_port = int(d.banner.split("metrics on port ")[1])
        return (d, sliced_pb2_grpc.InventoryStub(ch), sliced_pb2_grpc.PlacementStub(ch),
                sliced_pb2_grpc.TelemetryStub(ch))

    def scrape(self):
        return urllib.request.urlopen(
            "http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=10).read().decode()

    def report(self, tel, node, util=50.0):
        tel.ReportTpuMetrics(P.ReportTpuMetricsRequest(nodes=[P.NodeTpuMetrics(
            node_id=node, chips=[P.ChipMetrics(chip_index=i, tensorcore_utilization=util,
                                               duty_cycle=90, hbm_used_bytes=1e9,
                                               hbm_total_bytes=3.2e10,
                                               memory_bandwidth_utilization=30)
                                 for i in range(4)])]), timeout=10)

    def test_metrics_pass_promtool_and_show_scheduler_inventory_and_tpu_series(self):
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool (Debian package prometheus) is required")
        _, inv, pl, tel = self.start()
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=tpu_slice("v6e-a", 4) + tpu_slice("v6e-b", 4)
                                                 + [cpu_node("cpu-0")]), timeout=10)
        pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=P.ScalingConfig(
            num_workers=8, use_tpu=True, topology="4x4", accelerator_type="TPU-V6E")), timeout=10)
        self.report(tel, "v6e-a-w1", util=72.5)
        with self.assertRaises(grpc.RpcError):
            inv.GetNode(P.GetNodeRequest(node_id="nope"), timeout=10)
        text = self.scrape()
        check = subprocess.run([promtool, "check", "metrics"], input=text,
                               capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        for series in [
            'sliced_rpcs_total{code="NOT_FOUND",method="/sliced.v1.Inventory/GetNode"} 1',
            'sliced_placement_decisions_total{outcome="placed",priority="none"} 1',
            'sliced_placement_decisions_total{outcome="unschedulable",priority="none"}',
            'sliced_pending_placement_groups 1',
            'sliced_nodes{state="ALIVE"} 9',
            'sliced_tpu_chips{accelerator_type="TPU-V6E",zone="us-east5-b"} 32',
            'sliced_tpu_chips_free{accelerator_type="TPU-V6E",zone="us-east5-b"} 16',
            'sliced_slices_free{accelerator_type="TPU-V6E",topology="4x4",tier="on-demand",zone="us-east5-b"} 1',
            'sliced_fragmentation_ratio{accelerator_type="TPU-V6E",topology="4x4"} 0',
            'sliced_tpu_tensorcore_utilization_percent{node="v6e-a-w1",slice="v6e-a",accelerator_type="TPU-V6E",chip="3"} 72.5',
            'sliced_commit_duration_seconds_count',
            'sliced_solve_duration_seconds_count',
            'sliced_group_commit_ops_bucket',
        ]:
            self.assertIn(series, text)

    def test_telemetry_validated_and_gone_after_node_removal(self):
        _, inv, _, tel = self.start()
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=tpu_slice("v6e-a", 4)), timeout=10)
        for bad, field in [
            (P.ChipMetrics(chip_index=0, tensorcore_utilization=101), "tensorcore_utilization"),
            (P.ChipMetrics(chip_index=0, hbm_used_bytes=2, hbm_total_bytes=1), "hbm_used_bytes"),
            (P.ChipMetrics(chip_index=99), "chip_index"),
        ]:
            with self.assertRaises(grpc.RpcError) as err:
                tel.ReportTpuMetrics(P.ReportTpuMetricsRequest(nodes=[
                    P.NodeTpuMetrics(node_id="v6e-a-w0", chips=[bad])]), timeout=10)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(field, err.exception.details())
        with self.assertRaises(grpc.RpcError) as err:
            self.report(tel, "ghost")
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
        # A value the agent could not read is unset: no series, never a 0.
        tel.ReportTpuMetrics(P.ReportTpuMetricsRequest(nodes=[P.NodeTpuMetrics(
            node_id="v6e-a-w1", chips=[P.ChipMetrics(chip_index=2, duty_cycle=0)])]),
            timeout=10)
        text = self.scrape()
        w1 = 'node="v6e-a-w1",slice="v6e-a",accelerator_type="TPU-V6E",chip="2"'
        self.assertIn('sliced_tpu_duty_cycle_percent{%s} 0' % w1, text)
        self.assertNotIn('sliced_tpu_tensorcore_utilization_percent{%s}' % w1, text)
        self.assertNotIn('sliced_tpu_hbm_used_bytes{%s}' % w1, text)
        self.report(tel, "v6e-a-w0")
        self.assertIn('node="v6e-a-w0"', self.scrape())
        inv.RemoveNode(P.RemoveNodeRequest(node_id="v6e-a-w0"), timeout=10)
        self.assertNotIn('node="v6e-a-w0"', self.scrape())

    def test_stale_telemetry_is_dropped(self):
        _, inv, _, tel = self.start(None, "--telemetry_max_age=0.5s")
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=tpu_slice("v6e-a", 4)), timeout=10)
        self.report(tel, "v6e-a-w0")
        self.assertIn('node="v6e-a-w0"', self.scrape())
        # A report goes stale by age alone (--telemetry_max_age on the daemon's
        # clock); no event announces it, so poll the scrape with a deadline.
        wait_until(lambda: 'node="v6e-a-w0"' not in self.scrape(), timeout=10,
                   what="the stale report to leave /metrics")

    def test_log_ring_tail_filters_follow_and_restart(self):
        data = temp_data_dir(self)
        d, inv, pl, tel = self.start(data, "--log_lines_per_node=5")
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=tpu_slice("v6e-a", 4) + tpu_slice("v6e-b", 4)),
                          timeout=10)
        pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        job_slice = pg.slice_names[0]
        other = "v6e-b" if job_slice == "v6e-a" else "v6e-a"
        for node in (job_slice + "-w0", job_slice + "-w3", other + "-w0"):
            tel.AppendLogs(P.AppendLogsRequest(node_id=node, lines=[
                P.LogLine(severity=P.INFO if i % 2 else P.ERROR, text="%s line %d" % (node, i))
                for i in range(8)]), timeout=10)
        tail = lambda **kw: [l.text for l in tel.TailLogs(P.TailLogsRequest(**kw), timeout=10)]
        # The ring keeps the newest 5 lines per node.
        self.assertEqual(tail(node_id=other + "-w0"),
                         ["%s-w0 line %d" % (other, i) for i in range(3, 8)])
        by_pg = tail(placement_group_id=pg.placement_group_id)
        self.assertEqual(len(by_pg), 10)
        self.assertTrue(all(t.startswith(job_slice) for t in by_pg))
        self.assertEqual(len(tail(slice_name=other)), 5)
        errors = tail(node_id=job_slice + "-w0", min_severity=P.ERROR)
        self.assertEqual(errors, ["%s-w0 line %d" % (job_slice, i) for i in (4, 6)])
        with self.assertRaises(grpc.RpcError) as err:
            tail(node_id="ghost")
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)

        got = []
        stream = tel.TailLogs(P.TailLogsRequest(node_id=other + "-w0", follow=True), timeout=20)

        def on_line(line):
            got.append(line.text)
            return line.text == "live"
        # The daemon registers the follower as it reads the ring: once the
        # first stored line has arrived, a new line is delivered live.
        t = first_event_then(stream, on_line)
        tel.AppendLogs(P.AppendLogsRequest(node_id=other + "-w0",
                                           lines=[P.LogLine(text="live")]), timeout=10)
        t.join(timeout=20)
        stream.cancel()
        self.assertEqual(got[-1], "live")
        self.assertEqual(len(got), 6)

        d.kill9()
        _, _, _, tel2 = self.start(data, "--log_lines_per_node=5")
        texts = [l.text for l in tel2.TailLogs(P.TailLogsRequest(node_id=other + "-w0"), timeout=10)]
        self.assertEqual(texts, ["%s-w0 line %d" % (other, i) for i in range(4, 8)] + ["live"])

    def test_cluster_summary_against_a_known_fleet(self):
        _, inv, pl, tel = self.start()
        inv.RegisterNodes(P.RegisterNodesRequest(
            nodes=tpu_slice("v6e-a", 4) + tpu_slice("v6e-b", 4) + [cpu_node("c0"), cpu_node("c1")]),
            timeout=10)
        inv.DrainNode(P.DrainNodeRequest(node_id="c1"), timeout=10)
        pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        # With no single-host TPU node, a plain TPU bundle has to break the
        # free slice: 15 chips stay free, none of them in a whole slice.
        pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"TPU": 1})]), timeout=10)
        pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        s = tel.GetClusterSummary(P.GetClusterSummaryRequest(), timeout=10)
        self.assertEqual(dict(s.nodes_by_state), {"ALIVE": 9, "DRAINING": 1, "DEAD": 0})
        (row,) = list(s.free)
        self.assertEqual((row.accelerator_type, row.topology, row.total_slices, row.free_slices,
                          row.free_chips), ("TPU-V6E", "4x4", 2, 0, 15))
        self.assertAlmostEqual(s.fragmentation, 1.0)
        self.assertEqual(s.pending_placement_groups, 1)
        self.assertEqual(list(s.pending_shapes), ["1 x v6e-16 slice (1 group)"])


if __name__ == "__main__":
    unittest.main()
