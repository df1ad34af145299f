"""End to end: the real sliced binary, real RocksDB, real gRPC clients."""
import json
import os
import signal
import unittest

import grpc

from sliced_testlib import (REPO, Daemon, dynamic_call, list_services,
                            sliced_pb2, sliced_pb2_grpc, temp_data_dir, wait_until)
from sliced_ext import health_pb2, health_pb2_grpc


def fleet_request():
    with open(os.path.join(REPO, "examples", "fleet.json")) as f:
        text = f.read()
    from google.protobuf import json_format
    return json_format.Parse(text, sliced_pb2.RegisterNodesRequest()), text


class InventoryEndToEnd(unittest.TestCase):
    def start(self, data_dir, *args):
        d = Daemon(data_dir, *args).start()
        self.addCleanup(d.close)
        return d

    def test_reflection_and_health_work_without_proto_files(self):
        d = self.start(temp_data_dir(self))
        with d.channel() as ch:
            self.assertEqual(list_services(ch), [
                "grpc.health.v1.Health",
                "grpc.reflection.v1alpha.ServerReflection",
                "sliced.v1.Inventory", "sliced.v1.Placement", "sliced.v1.Telemetry"])
            # grpcurl's path: descriptors from reflection, then a dynamic call.
            health = dynamic_call(ch, "grpc.health.v1.Health/Check", "{}")
            self.assertEqual(health, {"status": "SERVING"})
            _, fleet_json = fleet_request()
            registered = dynamic_call(ch, "sliced.v1.Inventory/RegisterNodes", fleet_json)
            self.assertEqual(len(registered["nodes"]), 9)
            listed = dynamic_call(ch, "sliced.v1.Inventory/ListNodes",
                                  '{"labelSelector": {"ray.io/accelerator-type": "TPU-V6E"}}')
            self.assertEqual([n["nodeId"] for n in listed["nodes"]],
                             ["v6e-a-w0", "v6e-a-w1", "v6e-a-w2", "v6e-a-w3"])
            slices = dynamic_call(ch, "sliced.v1.Inventory/ListSlices", "{}")["slices"]
            self.assertEqual([(s["name"], s["podType"], s.get("intact", False)) for s in slices],
                             [("v4-b", "v4-16", True), ("v6e-a", "v6e-16", True)])
            # The README's JaxTrainer example, as grpcurl sends it.
            pg = dynamic_call(ch, "sliced.v1.Placement/SubmitScalingConfig", json.dumps({
                "scaling_config": {"num_workers": 4, "use_tpu": True, "topology": "4x4",
                                   "accelerator_type": "TPU-V6E"},
                "job_id": "job-1", "request_id": "job-1-try-1"}))
            self.assertEqual(pg["state"], "CREATED")
            self.assertEqual(pg["workers"][0]["env"]["TPU_NAME"], "v6e-a")

    def test_registered_nodes_survive_kill_9(self):
        data = temp_data_dir(self)
        d = self.start(data)
        request, _ = fleet_request()
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            inv.RegisterNodes(request, timeout=10)
            # A second acknowledged write just before the crash.
            inv.DrainNode(sliced_pb2.DrainNodeRequest(node_id="cpu-2"), timeout=10)
        d.kill9()
        self.assertEqual(d.proc.returncode, -signal.SIGKILL)

        d2 = self.start(data)
        self.assertIn("9 nodes loaded", d2.banner)
        with d2.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            nodes = inv.ListNodes(sliced_pb2.ListNodesRequest(), timeout=10).nodes
            self.assertEqual(sorted(n.node_id for n in nodes),
                             sorted(n.node_id for n in request.nodes))
            got = {n.node_id: n for n in nodes}
            self.assertEqual(got["cpu-2"].state, sliced_pb2.DRAINING)
            # Translated GKE labels were stored, not re-derived at load.
            self.assertEqual(got["v6e-a-w1"].labels["ray.io/tpu-slice-name"], "v6e-a")
            self.assertEqual(got["v6e-a-w1"].labels["sliced.io/capacity-tier"], "spot")
            self.assertEqual(got["v6e-a-w1"].resources["TPU"], 4)

    def test_rejected_batch_leaves_nothing_behind(self):
        data = temp_data_dir(self)
        d = self.start(data)
        good = sliced_pb2.Node(node_id="ok-1", address="10.1.0.1", resources={"CPU": 4})
        bad = sliced_pb2.Node(node_id="bad-1", address="10.1.0.2",
                              labels={"-bad": "x"}, resources={"CPU": 4})
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            with self.assertRaises(grpc.RpcError) as err:
                inv.RegisterNodes(sliced_pb2.RegisterNodesRequest(nodes=[good, bad]), timeout=10)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn('nodes[1] (node_id "bad-1"): labels["-bad"]', err.exception.details())
            self.assertEqual(len(inv.ListNodes(sliced_pb2.ListNodesRequest(), timeout=10).nodes), 0)
        d.kill9()
        d2 = self.start(data)
        self.assertIn("0 nodes loaded", d2.banner)

    def test_list_nodes_pages_through_a_selector(self):
        d = self.start(temp_data_dir(self), "--heartbeat_timeout=0")
        request, _ = fleet_request()
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            inv.RegisterNodes(request, timeout=10)
            seen, token = [], ""
            while True:
                page = inv.ListNodes(sliced_pb2.ListNodesRequest(
                    label_selector={"ray.io/accelerator-type": "in(TPU-V6E, TPU-V4)"},
                    page_size=2, page_token=token), timeout=10)
                self.assertLessEqual(len(page.nodes), 2)
                seen += [n.node_id for n in page.nodes]
                token = page.next_page_token
                if not token:
                    break
            self.assertEqual(seen, sorted(["v4-b-w0", "v4-b-w1"] +
                                          ["v6e-a-w%d" % i for i in range(4)]))
            with self.assertRaises(grpc.RpcError) as err:
                inv.ListNodes(sliced_pb2.ListNodesRequest(
                    label_selector={"ray.io/accelerator-type": "in()"}), timeout=10)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("label_selector", err.exception.details())

    def test_second_daemon_on_same_data_dir_is_refused(self):
        data = temp_data_dir(self)
        self.start(data)
        second = Daemon(data)
        with self.assertRaises(RuntimeError) as err:
            second.start()
        self.assertIn("locked", str(err.exception))
        self.assertEqual(second.proc.returncode, 1)

    def test_second_daemon_on_same_port_is_refused(self):
        # gRPC turns SO_REUSEPORT on by default; sliced turns it off, so a
        # second daemon (another data dir) can't bind the port and split the
        # clients with the first.
        first = self.start(temp_data_dir(self))
        address = "127.0.0.1:%d" % first.port
        second_dir = temp_data_dir(self)
        second = Daemon(second_dir, "--listen=" + address)
        self.addCleanup(second.close)
        with self.assertRaises(RuntimeError) as err:
            second.start()
        self.assertIn("cannot listen on " + address, str(err.exception))
        self.assertEqual(second.proc.returncode, 1)
        # A refused start leaves nothing behind: not even the data dir it made.
        self.assertFalse(os.path.exists(second_dir), second_dir)
        # ... and never removes one that was there: the first daemon's dir,
        # given to a third daemon refused for the same port.
        third = Daemon(first.data_dir, "--listen=" + address)
        self.addCleanup(third.close)
        with self.assertRaises(RuntimeError):
            third.start()
        self.assertTrue(os.path.isdir(first.data_dir))
        with first.channel() as ch:
            self.assertEqual(health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(), timeout=10).status,
                health_pb2.HealthCheckResponse.SERVING)

    def test_lease_expiry_marks_node_dead_and_heartbeat_revives(self):
        d = self.start(temp_data_dir(self), "--heartbeat_timeout=0.4s")
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            inv.RegisterNodes(sliced_pb2.RegisterNodesRequest(nodes=[
                sliced_pb2.Node(node_id="n1", address="h1", resources={"CPU": 1})]), timeout=10)
            # The lease runs out on the daemon's clock and no stream announces
            # a node's state, so poll GetNode with a deadline.
            wait_until(lambda: inv.GetNode(sliced_pb2.GetNodeRequest(node_id="n1"),
                                           timeout=10).state == sliced_pb2.DEAD,
                       timeout=10, what="n1 to turn DEAD")
            resp = inv.Heartbeat(sliced_pb2.HeartbeatRequest(
                heartbeats=[sliced_pb2.NodeHeartbeat(node_id="n1")]), timeout=10)
            self.assertAlmostEqual(resp.lease_seconds, 0.4)
            self.assertEqual(inv.GetNode(sliced_pb2.GetNodeRequest(node_id="n1"),
                                         timeout=10).state, sliced_pb2.ALIVE)

    def test_unhealthy_host_is_quarantined_until_healthy_and_across_restart(self):
        data = temp_data_dir(self)
        d = self.start(data, "--heartbeat_timeout=0")
        P = sliced_pb2
        beat = lambda inv, *problems, health=True: inv.Heartbeat(P.HeartbeatRequest(  # noqa: E731
            heartbeats=[P.NodeHeartbeat(node_id="v6e-a-w1", health=P.HostHealth(
                problems=list(problems)) if health else None)]), timeout=10)
        slice_of = lambda inv: next(s for s in inv.ListSlices(  # noqa: E731
            P.ListSlicesRequest(), timeout=10).slices if s.name == "v6e-a")
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            inv.RegisterNodes(fleet_request()[0], timeout=10)
            beat(inv, "slice.error.detected.gauge=1 (libtpu)")
            node = inv.GetNode(P.GetNodeRequest(node_id="v6e-a-w1"), timeout=10)
            self.assertEqual(node.state, P.ALIVE)
            self.assertEqual(node.quarantine_reason, "slice.error.detected.gauge=1 (libtpu)")
            self.assertFalse(slice_of(inv).intact)
            self.assertIn("v6e-a-w1 is quarantined (slice.error", slice_of(inv).reason)
            with self.assertRaises(grpc.RpcError) as err:
                beat(inv, "two\nlines")
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("heartbeats[0].health.problems[0]", err.exception.details())
        d.close()
        d = self.start(data, "--heartbeat_timeout=0")  # stored: still quarantined
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            self.assertFalse(slice_of(inv).intact)
            beat(inv, health=False)  # no report: no change
            self.assertFalse(slice_of(inv).intact)
            beat(inv)  # healthy
            self.assertEqual(inv.GetNode(P.GetNodeRequest(node_id="v6e-a-w1"),
                                         timeout=10).quarantine_reason, "")
            self.assertTrue(slice_of(inv).intact)

    def test_host_positions_from_the_agents_label(self):
        d = self.start(temp_data_dir(self), "--heartbeat_timeout=0")
        P = sliced_pb2
        # Worker ids in pod creation order; positions from the label.
        cells = ["1-1-0", "0-0-0", "1-0-0", "0-1-0"]
        host = lambda w, cell: P.Node(  # noqa: E731
            node_id="h%d" % w, address="10.0.0.%d" % w, resources={"TPU": 4, "CPU": 8},
            labels={"ray.io/accelerator-type": "TPU-V6E", "ray.io/tpu-topology": "4x4",
                    "ray.io/tpu-slice-name": "s", "ray.io/tpu-worker-id": str(w),
                    "sliced.io/tpu-host-coords": cell})
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            with self.assertRaises(grpc.RpcError) as err:
                inv.RegisterNodes(P.RegisterNodesRequest(nodes=[host(0, "2-0-0")]), timeout=10)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn('nodes[0] (node_id "h0"): labels["sliced.io/tpu-host-coords"]: '
                          '"2-0-0" is outside the slice\'s 2x2x1 host grid',
                          err.exception.details())
            inv.RegisterNodes(P.RegisterNodesRequest(
                nodes=[host(w, cells[w]) for w in range(4)]), timeout=10)
            s = inv.ListSlices(P.ListSlicesRequest(), timeout=10).slices[0]
            self.assertTrue(s.intact, s.reason)
            self.assertFalse(s.positions_assumed)
            self.assertEqual(list(s.node_ids), ["h0", "h1", "h2", "h3"])
            self.assertEqual(list(s.host_positions), cells)

    def test_sigterm_shuts_down_cleanly(self):
        d = self.start(temp_data_dir(self))
        with d.channel() as ch:
            self.assertEqual(health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(), timeout=10).status,
                health_pb2.HealthCheckResponse.SERVING)
        self.assertEqual(d.terminate(), 0)


if __name__ == "__main__":
    unittest.main()
