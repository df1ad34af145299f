"""End to end: label-domain gangs (topology_strategy) over real gRPC, the
Python client and grpcurl-style JSON; validation, Explain, kill -9 and
re-placement after a node loss."""
import os
import sys
import unittest

import grpc

from sliced_testlib import (REPO, dynamic_call, sliced_pb2, start_with_stubs,
                            temp_data_dir, wait_until)

sys.path.insert(0, os.path.join(REPO, "client", "python"))
from sliced_client import Client  # noqa: E402

P = sliced_pb2
GPU_DOMAIN = "ray.io/gpu-domain"


def gpu_node(name, domain, zone="us-east5-b"):
    labels = {"topology.kubernetes.io/zone": zone}
    if domain:
        labels[GPU_DOMAIN] = domain
    return P.Node(node_id=name, address=name + ".internal", labels=labels,
                  resources={"CPU": 32, "GPU": 8})


def domain(name, hosts, zone="us-east5-b"):
    return [gpu_node("%s-%d" % (name, i), name, zone) for i in range(hosts)]


def tpu_slice(name, zone, hosts=4):
    return [P.Node(node_id="%s-w%d" % (name, w), address="%s-w%d.internal" % (name, w),
                   labels={"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                           "cloud.google.com/gke-tpu-topology": "4x4",
                           "topology.kubernetes.io/zone": zone,
                           "TPU_NAME": name, "TPU_WORKER_ID": str(w)},
                   resources={"CPU": 100, "TPU": 4})
            for w in range(hosts)]


def level(label, strategy, per_domain=0):
    return P.TopologyLevel(label=label, strategy=P.PlacementStrategy.Value(strategy),
                           bundles_per_domain=per_domain)


class LabelDomainsEndToEnd(unittest.TestCase):
    def start(self, data=None, *args):
        return start_with_stubs(self, data, *args)

    def register(self, inv, nodes):
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=nodes), timeout=10)

    def domains_of(self, inv, pg, label=GPU_DOMAIN):
        labels = {n.node_id: n.labels for n in inv.ListNodes(P.ListNodesRequest(),
                                                              timeout=10).nodes}
        return [labels[b.node_id].get(label, "") for b in pg.bundles]

    def test_gpu_domain_gang_lands_in_one_domain_best_fit(self):
        _, inv, pl = self.start()
        # nvl-a holds 4 x 8 GPUs exactly; nvl-b is bigger; a loose node is in
        # no domain. Plain PACK would happily span them.
        self.register(inv, domain("nvl-a", 4) + domain("nvl-b", 6) + [gpu_node("loose", "")])
        pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"GPU": 8, "CPU": 4})] * 4,
            topology_strategy=[level(GPU_DOMAIN, "STRICT_PACK"),
                               level("ray.io/node-id", "STRICT_SPREAD")],
            job_id="job-gpu"), timeout=10)
        self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
        self.assertEqual(set(self.domains_of(inv, pg)), {"nvl-a"})
        self.assertEqual(len({b.node_id for b in pg.bundles}), 4)
        self.assertEqual(pg.strategy, P.STRICT_SPREAD)
        self.assertEqual([(t.label, P.PlacementStrategy.Name(t.strategy))
                          for t in pg.topology_strategy], [(GPU_DOMAIN, "STRICT_PACK")])

        # The next one fits only in nvl-b; one more than nvl-b holds waits,
        # and Explain counts the domains per reason.
        second = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"GPU": 8})] * 6,
            topology_strategy=[level(GPU_DOMAIN, "STRICT_PACK")]), timeout=10)
        self.assertEqual(set(self.domains_of(inv, second)), {"nvl-b"})
        third = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"GPU": 8})] * 2,
            topology_strategy=[level(GPU_DOMAIN, "STRICT_PACK")]), timeout=10)
        self.assertEqual(third.state, P.PENDING)
        self.assertIn("no ray.io/gpu-domain domain holds bundles 0-1 (STRICT_PACK)",
                      third.pending_reason)
        why = pl.ExplainPlacementGroup(P.ExplainPlacementGroupRequest(
            placement_group_id=third.placement_group_id), timeout=10)
        self.assertEqual(why.outcome, "UNSCHEDULABLE")
        details = "\n".join(why.details)
        self.assertIn("topology level 0 ray.io/gpu-domain STRICT_PACK domains", details)
        self.assertIn("too little free GPU", details)

        # Freeing nvl-a places the waiting group there.
        pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        wait_until(lambda: pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=third.placement_group_id), timeout=10).state == P.CREATED,
            what="the waiting gang placed")
        third = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=third.placement_group_id), timeout=10)
        self.assertEqual(set(self.domains_of(inv, third)), {"nvl-a"})

    def test_multi_slice_gang_one_zone_one_slice_per_group(self):
        _, inv, pl = self.start()
        self.register(inv, tpu_slice("a1", "us-east5-a") + tpu_slice("b1", "us-east5-b")
                      + tpu_slice("b2", "us-east5-b"))
        pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"TPU": 4})] * 8,
            topology_strategy=[level("ray.io/availability-zone", "STRICT_PACK"),
                               level("ray.io/tpu-slice-name", "STRICT_PACK", 4),
                               level("ray.io/node-id", "STRICT_SPREAD")]), timeout=10)
        self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
        slices = self.domains_of(inv, pg, "ray.io/tpu-slice-name")
        self.assertEqual(slices, ["b1"] * 4 + ["b2"] * 4)

    def test_bad_topology_is_rejected_naming_the_field_and_creates_nothing(self):
        _, inv, pl = self.start()
        self.register(inv, domain("nvl-a", 4))
        cases = [
            (dict(strategy=P.PACK, topology_strategy=[level(GPU_DOMAIN, "STRICT_PACK")]),
             "`strategy` and `topology_strategy` cannot both be specified"),
            (dict(topology_strategy=[level("ray.io/node-id", "STRICT_SPREAD"),
                                     level(GPU_DOMAIN, "STRICT_PACK")]),
             "topology_strategy[0].label: ray.io/node-id is the innermost level"),
            (dict(topology_strategy=[level(GPU_DOMAIN, "STRICT_PACK", 3)]),
             "topology_strategy[0].bundles_per_domain: 3 does not divide the 4 bundles"),
            (dict(topology_strategy=[P.TopologyLevel(label=GPU_DOMAIN)]),
             "topology_strategy[0].strategy: required"),
            (dict(topology_strategy=[level("bad key!", "STRICT_PACK")]),
             "topology_strategy[0].label: "),
        ]
        for fields, message in cases:
            with self.assertRaises(grpc.RpcError) as e:
                pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                    bundles=[P.Bundle(resources={"GPU": 1})] * 4, **fields), timeout=10)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(message, e.exception.details())
        self.assertEqual(len(pl.ListPlacementGroups(P.ListPlacementGroupsRequest(),
                                                    timeout=10).placement_groups), 0)

    def test_kill9_keeps_the_gang_and_a_lost_node_is_replaced_in_its_domain(self):
        data = temp_data_dir(self)
        d, inv, pl = self.start(data)
        self.register(inv, domain("nvl-a", 3) + domain("nvl-b", 2))
        pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"GPU": 8})] * 2,
            topology_strategy=[level(GPU_DOMAIN, "STRICT_PACK")]), timeout=10)
        self.assertEqual(set(self.domains_of(inv, pg)), {"nvl-b"})
        d.kill9()

        d, inv, pl = self.start(data)
        again = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        self.assertEqual(again.state, P.CREATED)
        self.assertEqual([b.node_id for b in again.bundles], [b.node_id for b in pg.bundles])
        self.assertEqual(len(again.topology_strategy), 1)

        # nvl-b loses a node and gains a spare; nvl-a has room too (and
        # more). The lost bundle comes back in nvl-b, beside its survivor.
        lost = pg.bundles[0].node_id
        self.register(inv, [gpu_node("nvl-b-9", "nvl-b")])
        inv.RemoveNode(P.RemoveNodeRequest(node_id=lost, force=True), timeout=10)
        wait_until(lambda: pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10).state == P.CREATED,
            what="the gang re-placed")
        replaced = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        self.assertEqual(replaced.bundles[1].node_id, pg.bundles[1].node_id)
        self.assertEqual(replaced.bundles[0].node_id, "nvl-b-9")

    def test_python_client_takes_rays_shape_and_json_takes_the_proto_names(self):
        d, inv, _ = self.start()
        self.register(inv, domain("nvl-a", 4) + domain("nvl-b", 2))
        with Client("127.0.0.1:%d" % d.port) as client:
            pg = client.create_placement_group(
                [{"GPU": 8}] * 2,
                topology_strategy=[{"ray.io/node-id": "STRICT_SPREAD",
                                    GPU_DOMAIN: "STRICT_PACK"}], job_id="job-py")
            self.assertEqual(pg.state, "CREATED", pg.pending_reason)
            nodes = {b.node_id for b in pg.bundles}
            self.assertEqual(len(nodes), 2)
            self.assertTrue(all(n.startswith("nvl-b-") for n in nodes), nodes)
            with self.assertRaises(ValueError) as e:
                client.create_placement_group([{"GPU": 1}], "PACK",
                                              topology_strategy=[{GPU_DOMAIN: "STRICT_PACK"}])
            self.assertIn("cannot both be specified", str(e.exception))
        with d.channel() as ch:
            out = dynamic_call(ch, "sliced.v1.Placement/CreatePlacementGroup", """
                {"bundles": [{"resources": {"GPU": 8}}, {"resources": {"GPU": 8}}],
                 "topology_strategy": [{"label": "ray.io/gpu-domain",
                                        "strategy": "STRICT_PACK"}]}""")
        self.assertEqual(out["state"], "CREATED")
        self.assertEqual(out["topologyStrategy"],
                         [{"label": GPU_DOMAIN, "strategy": "STRICT_PACK"}])


if __name__ == "__main__":
    unittest.main()
