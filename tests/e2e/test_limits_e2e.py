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

    def test_bad_limit_flag_exits_2(self):
        with self.assertRaises(RuntimeError) as err:
            Daemon(temp_data_dir(self), "--max_pending=0").start()
        self.assertIn("--max_pending must be >= 1", str(err.exception))


if __name__ == "__main__":
    unittest.main()
