"""End to end: sub-slices carved out of a v5p 4x4x4 pod over real gRPC and the
Python client: physical worker order, the sub-slice env, whole requests
waiting for a carved pod, the subslicing switches, and kill -9."""
import os
import sys
import unittest
import urllib.request

from sliced_testlib import (REPO, dynamic_call, sliced_pb2, sliced_pb2_grpc,
                            start_with_stubs, temp_data_dir, wait_until)

sys.path.insert(0, os.path.join(REPO, "client", "python"))
from sliced_client import Client, ScalingConfig  # noqa: E402

P = sliced_pb2


def pod(name, coords=None, topology="4x4x4"):
    """A v5p pod, 4x4x4 unless told: one host per 4 chips (a 4x4x4 has 16
    hosts, host grid 2x2x4), GKE labels; host w at coords[w] ("x-y-z",
    reported by the node agent) when given."""
    x, y, z = (int(d) for d in topology.split("x"))
    nodes = []
    for w in range(x * y * z // 4):
        labels = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                  "cloud.google.com/gke-tpu-topology": topology,
                  "topology.kubernetes.io/zone": "us-east5-a",
                  "TPU_NAME": name, "TPU_WORKER_ID": str(w)}
        if coords:
            labels["sliced.io/tpu-host-coords"] = coords[w]
        nodes.append(P.Node(node_id="%s-w%d" % (name, w),
                            address="10.1.0.%d" % (w + 1),
                            labels=labels, resources={"CPU": 200, "TPU": 4}))
    return nodes


def cube(partition, block, subblock, state="HEALTHY"):
    """A TPU7x sub-block as GKE dynamic slicing labels it: 16 hosts, no
    TPU_NAME / TPU_WORKER_ID (the partition names the slice, the host's
    reported coordinates give its worker id)."""
    nodes = []
    for c in range(16):
        labels = {"cloud.google.com/gke-tpu-accelerator": "tpu7x",
                  "cloud.google.com/gke-tpu-topology": "4x4x4",
                  "cloud.google.com/gce-topology-block": block,
                  "cloud.google.com/gce-topology-subblock": subblock,
                  "cloud.google.com/gke-tpu-partition-4x4x4-id": partition,
                  "cloud.google.com/gke-tpu-partition-4x4x4-state": state,
                  "topology.kubernetes.io/zone": "us-central1-c",
                  "sliced.io/tpu-host-coords": "%d-%d-%d" % (c % 2, (c // 2) % 2, c // 4)}
        nodes.append(P.Node(node_id="%s-h%d" % (partition, c),
                            address="%s-h%d.internal" % (partition, c),
                            labels=labels, resources={"CPU": 200, "TPU": 4}))
    return nodes


def v5p(topology, workers, **extra):
    return P.ScalingConfig(num_workers=workers, use_tpu=True, topology=topology,
                           accelerator_type="TPU-V5P", **extra)


class SubslicesEndToEnd(unittest.TestCase):
    def start(self, data=None, *args):
        return start_with_stubs(self, data, *args)

    def submit(self, pl, config, job="job"):
        return pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=config, job_id=job), timeout=10)

    def get(self, pl, pg):
        return pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)

    def test_two_sub_slices_then_a_whole_pod_waits_for_both(self):
        # Workers numbered in reverse of their physical place (pod creation
        # order is not position): the sub-slice follows positions.
        coords = []
        for w in range(16):
            c = 15 - w
            coords.append("%d-%d-%d" % (c % 2, (c // 2) % 2, c // 4))
        data = temp_data_dir(self)
        d, inv, pl = self.start(data)
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=pod("pod-a", coords)), timeout=10)

        first = self.submit(pl, v5p("2x2x2", 2))
        self.assertEqual(first.state, P.CREATED, first.pending_reason)
        self.assertEqual(list(first.slice_names), ["pod-a/2x2x2@0-0-0"])
        self.assertEqual([w.node_id for w in first.workers], ["pod-a-w15", "pod-a-w11"])
        for i, w in enumerate(first.workers):
            self.assertEqual(w.env["TPU_WORKER_ID"], str(i))
            self.assertEqual(w.env["TPU_WORKER_HOSTNAMES"], "10.1.0.16,10.1.0.12")
            self.assertEqual(w.env["TPU_NAME"], "pod-a/2x2x2@0-0-0")
            self.assertEqual(w.env["TPU_TOPOLOGY"], "2x2x2")
            self.assertEqual(w.env["TPU_ACCELERATOR_TYPE"], "v5p-16")
            self.assertEqual(w.env["TPU_HOST_BOUNDS"], "1,1,2")
            self.assertEqual(w.env["TPU_CHIPS_PER_HOST_BOUNDS"], "2,2,1")
            self.assertEqual(w.env["TPU_SKIP_MDS_QUERY"], "true")
            # GKE sets these from the parent 4x4x4 too (a cube wraps around;
            # a 2x2x2 does not), and Ray would drop the bounds of an actor
            # that holds its whole host unless told not to.
            self.assertEqual(w.env["TPU_TOPOLOGY_WRAP"], "false,false,false")
            self.assertEqual(w.env["WRAP"], "false,false,false")
            self.assertEqual(w.env["HOST_BOUNDS"], "1,1,2")
            self.assertEqual(w.env["CHIPS_PER_HOST_BOUNDS"], "2,2,1")
            self.assertEqual(w.env["RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS"], "1")

        second = self.submit(pl, v5p("2x2x2", 2))
        self.assertEqual(second.state, P.CREATED, second.pending_reason)
        self.assertNotEqual(second.slice_names[0], first.slice_names[0])
        self.assertTrue(second.slice_names[0].startswith("pod-a/2x2x2@"))
        self.assertFalse({w.node_id for w in first.workers}
                         & {w.node_id for w in second.workers})

        whole = self.submit(pl, v5p("4x4x4", 16))
        self.assertEqual(whole.state, P.PENDING)

        # What operators see: the carved pod, what it could still give, the
        # summary and /metrics.
        listed = {s.name: s for s in inv.ListSlices(P.ListSlicesRequest(), timeout=10).slices}
        pod_a = listed["pod-a"]
        self.assertEqual(sorted(pod_a.subslices),
                         sorted([first.slice_names[0], second.slice_names[0]]))
        # Buddy style, the second sub-slice sits on top of the first: the
        # column x=0, y=0 is full, 6 of 8 2x2x2 boxes, 3 of 4 2x2x4 columns
        # and the x=1 half stay free.
        self.assertEqual(second.slice_names[0], "pod-a/2x2x2@0-0-2")
        self.assertEqual(pod_a.free_subslices["2x2x2"], 6)
        self.assertEqual(pod_a.free_subslices["2x2x4"], 3)
        self.assertEqual(pod_a.free_subslices["2x4x4"], 1)
        self.assertEqual(pod_a.largest_free_subslice, "2x4x4")
        with d.channel() as ch:
            s = sliced_pb2_grpc.TelemetryStub(ch).GetClusterSummary(
                P.GetClusterSummaryRequest(), timeout=10)
        free = {(f.accelerator_type, f.topology): f.free for f in s.free_subslices}
        self.assertEqual(free[("TPU-V5P", "2x2x2")], 6)
        # 48 chips of pod-a are free, 32 of them in its largest free box
        # (2x4x4): a third of the free chips sit outside it.
        self.assertAlmostEqual(s.subslice_fragmentation, 1.0 / 3)
        metrics_port = int(d.banner.split("metrics on port ")[1])
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port,
                                      timeout=10).read().decode()
        self.assertIn('sliced_free_subslices{accelerator_type="TPU-V5P",topology="2x2x2"} 6',
                      text)
        self.assertIn("sliced_subslice_fragmentation_ratio{", text)

        # A kill -9 changes nothing of it.
        d.kill9()
        d, inv, pl = self.start(data)
        again = self.get(pl, first)
        self.assertEqual(list(again.slice_names), ["pod-a/2x2x2@0-0-0"])
        self.assertEqual([w.node_id for w in again.workers], ["pod-a-w15", "pod-a-w11"])
        self.assertEqual(self.get(pl, whole).state, P.PENDING)

        pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
            placement_group_id=first.placement_group_id), timeout=10)
        self.assertEqual(self.get(pl, whole).state, P.PENDING)
        pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
            placement_group_id=second.placement_group_id), timeout=10)
        wait_until(lambda: self.get(pl, whole).state == P.CREATED,
                   what="the whole pod placed once both sub-slices are gone")
        self.assertEqual(list(self.get(pl, whole).slice_names), ["pod-a"])

    def test_switches_per_request_and_per_cluster(self):
        _, inv, pl = self.start()
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=pod("pod-a")), timeout=10)
        never = self.submit(pl, v5p("2x2x2", 2, allow_subslice=False))
        self.assertEqual(never.state, P.INFEASIBLE, never.pending_reason)
        # A plain slice group carves only when it asks to.
        plain = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            slice=P.SliceRequirement(accelerator_type="TPU-V5P", topology="2x2x2")),
            timeout=10)
        self.assertEqual(plain.state, P.INFEASIBLE)
        asked = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            slice=P.SliceRequirement(accelerator_type="TPU-V5P", topology="2x2x2",
                                     num_slices=2, allow_subslice=True)), timeout=10)
        self.assertEqual(asked.state, P.CREATED, asked.pending_reason)
        self.assertEqual(len(asked.slice_names), 2)
        self.assertTrue(asked.slice.allow_subslice)

        _, inv2, pl2 = self.start(None, "--subslicing=false")
        inv2.RegisterNodes(P.RegisterNodesRequest(nodes=pod("pod-b")), timeout=10)
        off = self.submit(pl2, v5p("2x2x2", 2, allow_subslice=True))
        self.assertEqual(off.state, P.INFEASIBLE, off.pending_reason)

    def test_a_cube_of_a_longer_pod_wraps_only_on_the_pods_whole_axes(self):
        # A 4x4x4 carved out of a 4x4x8: its z-ends link to the other half of
        # the pod, so only x and y wrap around (a whole 4x4x4 wraps on all).
        _, inv, pl = self.start()
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=pod("pod-b", topology="4x4x8")),
                          timeout=10)
        half = self.submit(pl, v5p("4x4x4", 16))
        self.assertEqual(half.state, P.CREATED, half.pending_reason)
        self.assertTrue(half.slice_names[0].startswith("pod-b/4x4x4@"), half.slice_names)
        for group in (half, self.get(pl, half)):
            self.assertEqual(len(group.workers), 16)
            for w in group.workers:
                self.assertEqual(w.env["TPU_TOPOLOGY"], "4x4x4")
                self.assertEqual(w.env["TPU_HOST_BOUNDS"], "2,2,4")
                self.assertEqual(w.env["TPU_TOPOLOGY_WRAP"], "true,true,false")
                self.assertEqual(w.env["WRAP"], "true,true,false")

    def test_explain_says_why_no_sub_slice_fits(self):
        _, inv, pl = self.start()
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=pod("pod-a")), timeout=10)
        for _ in range(2):  # two halves of the pod
            half = self.submit(pl, v5p("2x4x4", 8))
            self.assertEqual(half.state, P.CREATED, half.pending_reason)
        waits = self.submit(pl, v5p("2x2x1", 1))
        self.assertEqual(waits.state, P.PENDING)
        self.assertIn("No subslice of '2x2x1' is schedulable across any of the candidate "
                      "parent topologies: 1 v5p slice considered, 1 no free aligned box; "
                      "1 carved; largest free aligned box none", waits.pending_reason)
        why = pl.ExplainPlacementGroup(P.ExplainPlacementGroupRequest(
            placement_group_id=waits.placement_group_id), timeout=10)
        self.assertIn("sub-slices 2x2x1 (v5p-8) from larger slices", "\n".join(why.details))

    def test_v7x_slices_are_stitched_from_cubes_of_one_block(self):
        _, inv, pl = self.start()
        nodes = (cube("p-a1", "block-a", "sb-1") + cube("p-a2", "block-a", "sb-2")
                 + cube("p-b1", "block-b", "sb-1")
                 + cube("p-c1", "block-c", "sb-1") + cube("p-c2", "block-c", "sb-2")
                 + cube("p-c3", "block-c", "sb-3", state="DEGRADED"))
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=nodes), timeout=10)
        config = P.ScalingConfig(num_workers=32, use_tpu=True, topology="4x4x8",
                                 accelerator_type="TPU-V7X")
        first = self.submit(pl, config)
        self.assertEqual(first.state, P.CREATED, first.pending_reason)
        self.assertEqual(list(first.slice_names), ["block-a/4x4x8@p-a1+p-a2"])
        self.assertEqual(first.workers[0].env["TPU_TOPOLOGY"], "4x4x8")
        self.assertEqual(first.workers[0].env["TPU_HOST_BOUNDS"], "2,2,8")
        self.assertEqual(first.workers[0].env["TPU_TOPOLOGY_WRAP"], "true,true,true")
        # As the platform spells Ironwood (Ray's pod type says v7x-256).
        self.assertEqual(first.workers[0].env["TPU_ACCELERATOR_TYPE"], "tpu7x-256")
        self.assertEqual(len(first.workers[0].env["TPU_WORKER_HOSTNAMES"].split(",")), 32)
        self.assertEqual(first.workers[16].node_id, "p-a2-h0")
        # block-c has two healthy cubes (p-c3 is DEGRADED); block-b only one:
        # never stitched across blocks.
        second = self.submit(pl, config)
        self.assertEqual(list(second.slice_names), ["block-c/4x4x8@p-c1+p-c2"])
        third = self.submit(pl, config)
        self.assertEqual(third.state, P.PENDING)
        self.assertIn("no block has 2 free whole 4x4x4 cubes for a 4x4x8", third.pending_reason)
        listed = {s.name: s for s in inv.ListSlices(P.ListSlicesRequest(), timeout=10).slices}
        self.assertFalse(listed["p-c3"].intact)
        self.assertIn("partition is DEGRADED", listed["p-c3"].reason)

    def test_python_client_and_json(self):
        d, inv, _ = self.start()
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=pod("pod-a")), timeout=10)
        with Client("127.0.0.1:%d" % d.port) as client:
            pg = client.submit(ScalingConfig(num_workers=2, use_tpu=True, topology="2x2x2",
                                             accelerator_type="TPU-V5P", allow_subslice=True))
            self.assertEqual(pg.state, "CREATED", pg.pending_reason)
            self.assertEqual(pg.slice_names, ["pod-a/2x2x2@0-0-0"])
            self.assertEqual(pg.workers[1].env["TPU_WORKER_ID"], "1")
        with d.channel() as ch:
            out = dynamic_call(ch, "sliced.v1.Placement/SubmitScalingConfig", """
                {"scaling_config": {"num_workers": 2, "use_tpu": true, "topology": "2x2x2",
                                    "accelerator_type": "TPU-V5P"}}""")
        self.assertEqual(out["state"], "CREATED")
        self.assertEqual(out["sliceNames"], ["pod-a/2x2x2@0-0-2"])


if __name__ == "__main__":
    unittest.main()
