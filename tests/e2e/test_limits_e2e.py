"""End to end: each size limit is a flag and answers with a clear error."""
import unittest

import grpc

from sliced_testlib import Daemon, sliced_pb2, sliced_pb2_grpc, temp_data_dir
from test_placement_e2e import cpu_node

P = sliced_pb2


class LimitsEndToEnd(unittest.TestCase):
    def start(self, *flags):
        d = Daemon(temp_data_dir(self), "--heartbeat_timeout=0", *flags).start()
        self.addCleanup(d.close)
        ch = d.channel()
        self.addCleanup(ch.close)
        return sliced_pb2_grpc.InventoryStub(ch), sliced_pb2_grpc.PlacementStub(ch), \
            sliced_pb2_grpc.TelemetryStub(ch)

    def assert_rejected(self, call, code, text):
        with self.assertRaises(grpc.RpcError) as err:
            call()
        self.assertEqual(err.exception.code(), code, err.exception.details())
        self.assertIn(text, err.exception.details())

    def test_each_limit(self):
        inv, pl, tel = self.start("--max_nodes_per_batch=3", "--max_labels_per_node=10",
                                  "--max_bundles_per_pg=4", "--max_pending=2",
                                  "--max_streams=1", "--max_message_bytes=100000")
        I, R = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
        self.assert_rejected(lambda: inv.RegisterNodes(P.RegisterNodesRequest(
            nodes=[cpu_node("n%d" % i) for i in range(4)]), timeout=10), I,
            "at most 3 nodes per batch")
        self.assert_rejected(lambda: inv.RegisterNodes(P.RegisterNodesRequest(
            nodes=[cpu_node("n0", **{"k%d" % i: "v" for i in range(9)})]), timeout=10), I,
            "at most 10 labels per node")
        self.assert_rejected(lambda: inv.RegisterNodes(P.RegisterNodesRequest(nodes=[
            P.Node(node_id="big", address="a", labels={"k": "v" * 63},
                   resources={"x%d" % i: 1 for i in range(10000)})]), timeout=10),
            R, "")  # over --max_message_bytes: gRPC refuses the message itself
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=[cpu_node("n0", 1), cpu_node("n1", 2)]),
                          timeout=10)
        self.assertEqual(pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 2})]), timeout=10).state, P.CREATED)
        self.assert_rejected(lambda: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1})] * 5), timeout=10), I, "at most 4 bundles")
        self.assert_rejected(lambda: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            slice=P.SliceRequirement(accelerator_type="v6e", topology="4x4", num_slices=2)),
            timeout=10), I, "8 host bundles; at most 4")
        for _ in range(2):  # fill the queue: no 2-CPU bundle fits until n1 frees
            self.assertEqual(pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                bundles=[P.Bundle(resources={"CPU": 2})]), timeout=10).state, P.PENDING)
        self.assert_rejected(lambda: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 2})]), timeout=10), R, "pending queue is full")
        self.assertEqual(len(pl.ListPlacementGroups(P.ListPlacementGroupsRequest(),
                                                    timeout=10).placement_groups), 3)
        # A group that fits is still placed with a full queue.
        self.assertEqual(pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1})]), timeout=10).state, P.CREATED)
        first = pl.WatchPlacementGroups(P.WatchPlacementGroupsRequest(), timeout=10)
        next(first)  # open: it holds the one stream slot
        self.assert_rejected(lambda: list(tel.TailLogs(P.TailLogsRequest(), timeout=10)),
                             R, "too many open streams (1)")
        first.cancel()

    def test_request_shapes_that_are_refused_and_names_that_are_not(self):
        inv, pl, _ = self.start()
        I = grpc.StatusCode.INVALID_ARGUMENT
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=[cpu_node("n0", 4)]), timeout=10)
        one = [P.Bundle(resources={"CPU": 1})]
        # Fallback lists, selector keys and in(...) values are bounded: each
        # grew the stored pending reason without bound.
        self.assert_rejected(lambda: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=one, fallback_strategy=[P.FallbackOption(bundles=one)] * 17),
            timeout=10), I, "fallback_strategy: at most 16 lists, got 17")
        self.assert_rejected(lambda: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1},
                              label_selector={"k%d" % i: "!x" for i in range(65)})]),
            timeout=10), I, "bundles[0].label_selector: at most 64 keys, got 65")
        self.assert_rejected(lambda: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1}, label_selector={
                "k": "in(%s)" % ",".join("v%d" % i for i in range(257))})]),
            timeout=10), I, 'bundles[0].label_selector["k"]: at most 256 values in in(...)')
        # Errors name the API's fields.
        self.assert_rejected(lambda: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=one, fallback_strategy=[P.FallbackOption()]), timeout=10), I,
            "fallback_strategy[0].bundles: at least one bundle")
        self.assert_rejected(lambda: pl.ExplainPlacementGroup(P.ExplainPlacementGroupRequest(
            dry_run=P.CreatePlacementGroupRequest(bundles=[P.Bundle(resources={"CPU": -1})])),
            timeout=10), I, 'dry_run: bundles[0].resources["CPU"]')
        self.assert_rejected(lambda: pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=P.ScalingConfig(num_workers=1, tpu_resource_per_chip=-5)),
            timeout=10), I, "tpu_resource_per_chip")
        self.assert_rejected(lambda: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            slice=P.SliceRequirement(accelerator_type="TPU-V6E", topology="4x4",
                                     resources_per_host={"CPU": 0})), timeout=10), I,
            "slice.resources_per_host: give at least one resource > 0")
        # A health problem with a control character (it is stored and logged).
        self.assert_rejected(lambda: inv.Heartbeat(P.HeartbeatRequest(heartbeats=[
            P.NodeHeartbeat(node_id="n0", health=P.HostHealth(problems=["ok\x1b[2J"]))]),
            timeout=10), I, "problems[0]: must be one line of 1..")
        # Names beyond ASCII are names, not control characters.
        pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=one, name="训练", job_id="café"), timeout=10)
        self.assertEqual((pg.name, pg.job_id), ("训练", "café"))

    def test_bad_limit_flag_exits_2(self):
        with self.assertRaises(RuntimeError) as err:
            Daemon(temp_data_dir(self), "--max_pending=0").start()
        self.assertIn("--max_pending must be >= 1", str(err.exception))


if __name__ == "__main__":
    unittest.main()
