"""End to end: the daemon's own behaviour as a process: --help, refused
starts, how fast it stops, what it logs."""
import os
import signal
import subprocess
import time
import unittest

from google.protobuf import json_format

from sliced_testlib import (REPO, SLICED_BIN, Daemon,
                            sliced_pb2 as P, sliced_pb2_grpc, temp_data_dir)


def register_fleet(channel):
    with open(os.path.join(REPO, "examples", "fleet.json")) as f:
        request = json_format.Parse(f.read(), P.RegisterNodesRequest())
    sliced_pb2_grpc.InventoryStub(channel).RegisterNodes(request, timeout=10)


TIMESTAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "


class DaemonEndToEnd(unittest.TestCase):
    def start(self, data_dir, *args):
        d = Daemon(data_dir, *args).start()
        self.addCleanup(d.close)
        return d

    def run_sliced(self, *args):
        return subprocess.run([SLICED_BIN] + list(args), capture_output=True,
                              text=True, timeout=30)

    def test_help_lists_the_daemons_flags_with_defaults(self):
        out = self.run_sliced("--help")
        text = out.stdout + out.stderr
        self.assertNotIn("No flags matched", text)
        self.assertNotIn("sliced: sliced:", text)
        for flag in ("--listen", "--data_dir", "--heartbeat_timeout", "--auth_tokens"):
            self.assertIn(flag, text)
        self.assertIn('default: "127.0.0.1:50051"', text)

    def test_refused_start_leaves_no_data_dir(self):
        for args, says in (
                (["--listen=0.0.0.0:0"], "--insecure_listen_any"),
                (["--tls_cert=/nonexistent.pem"], "--tls_cert and --tls_key"),
                (["--tls_cert=/nonexistent.pem", "--tls_key=/nonexistent.key"],
                 "--tls_key: can't read"),
                (["--auth_tokens=/nonexistent"], "--auth_tokens: can't read")):
            with self.subTest(args=args):
                data_dir = temp_data_dir(self)
                out = self.run_sliced("--metrics_listen=", "--data_dir=" + data_dir, *args)
                self.assertEqual(out.returncode, 1)
                self.assertIn(says, out.stderr)
                self.assertNotIn("sliced: sliced:", out.stderr)
                self.assertFalse(os.path.exists(data_dir), os.listdir(os.path.dirname(data_dir)))

    def test_sigterm_with_an_open_watch_stops_within_a_second(self):
        d = self.start(temp_data_dir(self), "--heartbeat_timeout=0")
        with d.channel() as ch:
            register_fleet(ch)
            pl = sliced_pb2_grpc.PlacementStub(ch)
            pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                bundles=[P.Bundle(resources={"CPU": 1})]), timeout=10)
            stream = pl.WatchPlacementGroups(P.WatchPlacementGroupsRequest(), timeout=60)
            next(stream)  # subscribed: the current state has arrived; it stays open
            start = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            d.proc.wait(timeout=20)
            elapsed = time.monotonic() - start
            stream.cancel()
        self.assertEqual(d.proc.returncode, 0)
        self.assertLess(elapsed, 1.5)

    def test_state_changes_are_logged_one_line_each(self):
        d = self.start(temp_data_dir(self), "--heartbeat_timeout=2s")
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            pl = sliced_pb2_grpc.PlacementStub(ch)
            inv.RegisterNodes(P.RegisterNodesRequest(nodes=[
                P.Node(node_id=n, address=n, resources={"CPU": 4}) for n in ("n1", "n2")]),
                timeout=10)
            d.wait_for_stderr("^" + TIMESTAMP + 'node "n1" ALIVE: registered$',
                         "^" + TIMESTAMP + 'node "n2" ALIVE: registered$')
            inv.DrainNode(P.DrainNodeRequest(node_id="n2"), timeout=10)
            d.wait_for_stderr(TIMESTAMP + 'node "n2" DRAINING \\(was ALIVE\\): DrainNode$')
            inv.UndrainNode(P.UndrainNodeRequest(node_id="n2"), timeout=10)
            d.wait_for_stderr(TIMESTAMP + 'node "n2" ALIVE \\(was DRAINING\\): UndrainNode$')
            pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                bundles=[P.Bundle(resources={"CPU": 4})], job_id="j1"), timeout=10)
            held = pg.bundles[0].node_id
            d.wait_for_stderr(TIMESTAMP + 'placement group %s \\(job "j1"\\) CREATED: '
                         "placed on node\\(s\\) %s$" % (pg.placement_group_id, held))
            # No heartbeats: both leases run out, the group loses its node.
            d.wait_for_stderr(
                TIMESTAMP + 'node "%s" DEAD \\(was ALIVE\\): lease expired \\(no heartbeat '
                "for [0-9.]+s\\)$" % held,
                TIMESTAMP + "placement group %s .*RESCHEDULING: lost node\\(s\\) %s$"
                % (pg.placement_group_id, held))
            inv.Heartbeat(P.HeartbeatRequest(heartbeats=[P.NodeHeartbeat(node_id="n1")]),
                          timeout=10)
            d.wait_for_stderr(
                TIMESTAMP + 'node "n1" ALIVE \\(was DEAD\\): heartbeat after DEAD$',
                "placement group %s .*CREATED: placed on node\\(s\\) n1$"
                % pg.placement_group_id)
            pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
                placement_group_id=pg.placement_group_id), timeout=10)
            d.wait_for_stderr("placement group %s .*REMOVED$" % pg.placement_group_id)

    def test_log_level_error_hides_state_changes(self):
        d = self.start(temp_data_dir(self), "--log_level=error", "--heartbeat_timeout=0")
        with d.channel() as ch:
            register_fleet(ch)
        self.assertEqual(d.terminate(), 0)
        self.assertNotIn("registered", d.stderr_text())
        out = self.run_sliced("--log_level=loud", "--data_dir=" + temp_data_dir(self))
        self.assertEqual(out.returncode, 2)
        self.assertIn('--log_level: want error, info or debug, got "loud"', out.stderr)


if __name__ == "__main__":
    unittest.main()
