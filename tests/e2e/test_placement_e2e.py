"""End to end: placement groups and ScalingConfigs on the real daemon."""
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import grpc

from sliced_testlib import (REPO, Daemon, first_event_then, sliced_pb2, sliced_pb2_grpc,
                            temp_data_dir, wait_until)

sys.path.insert(0, os.path.join(REPO, "client", "python"))
from sliced_client import Client  # noqa: E402

P = sliced_pb2


def tpu_slice(name, hosts, zone="us-east5-b", tier_labels=None, chips=4,
              accel="tpu-v6e-slice", topology="4x4"):
    nodes = []
    for w in range(hosts):
        labels = {"cloud.google.com/gke-tpu-accelerator": accel,
                  "cloud.google.com/gke-tpu-topology": topology,
                  "topology.kubernetes.io/zone": zone,
                  "TPU_NAME": name, "TPU_WORKER_ID": str(w)}
        labels.update(tier_labels or {})
        nodes.append(P.Node(node_id="%s-w%d" % (name, w), address="%s-w%d.internal" % (name, w),
                            labels=labels, resources={"CPU": 100, "TPU": chips}))
    return nodes


def cpu_node(name, cpus=16, **labels):
    return P.Node(node_id=name, address=name + ".internal", labels=labels,
                  resources={"CPU": cpus})


SEED = P.ScalingConfig(num_workers=4, use_tpu=True, topology="4x4",
                       accelerator_type="TPU-V6E", placement_strategy="SPREAD")


class PlacementEndToEnd(unittest.TestCase):
    def start(self, data=None, *args):
        d = Daemon(data or temp_data_dir(self), *args).start()
        self.addCleanup(d.close)
        ch = d.channel()
        self.addCleanup(ch.close)
        return d, sliced_pb2_grpc.InventoryStub(ch), sliced_pb2_grpc.PlacementStub(ch)

    def register(self, inv, nodes):
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=nodes), timeout=10)

    def test_watch_filters_by_job_and_group_together(self):
        d, inv, pl = self.start(None, "--heartbeat_timeout=0")
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=[cpu_node("c0", 64)]), timeout=10)

        def create(job):
            return pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                bundles=[P.Bundle(resources={"CPU": 1})], job_id=job), timeout=10)
        a, b = create("a"), create("b")
        requests = {
            "a+a": P.WatchPlacementGroupsRequest(job_id="a",
                                                 placement_group_id=a.placement_group_id),
            "b+a": P.WatchPlacementGroupsRequest(job_id="b",
                                                 placement_group_id=a.placement_group_id),
            "job b": P.WatchPlacementGroupsRequest(job_id="b"),
        }
        seen = {name: [] for name in requests}
        streams = {name: pl.WatchPlacementGroups(r, timeout=30) for name, r in requests.items()}

        def read(name):
            try:
                for ev in streams[name]:
                    seen[name].append((ev.placement_group.placement_group_id,
                                       P.PlacementGroupState.Name(ev.placement_group.state)))
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.CANCELLED)
        readers = [threading.Thread(target=read, args=(name,)) for name in requests]
        for t in readers:
            t.start()
        wait_until(lambda: len(seen["a+a"]) == 1 and len(seen["job b"]) == 1,
                   what="every stream's current state")
        for pg in (a, b):
            pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
                placement_group_id=pg.placement_group_id), timeout=10)
        wait_until(lambda: len(seen["a+a"]) == 2 and len(seen["job b"]) == 2,
                   what="the REMOVED events")
        time.sleep(0.3)  # anything wrongly sent to "b+a" would arrive by now
        for stream in streams.values():
            stream.cancel()
        for t in readers:
            t.join(timeout=10)
        self.assertEqual(seen["a+a"], [(a.placement_group_id, "CREATED"),
                                       (a.placement_group_id, "REMOVED")])
        self.assertEqual(seen["b+a"], [])  # group a is not of job b
        self.assertEqual(seen["job b"], [(b.placement_group_id, "CREATED"),
                                         (b.placement_group_id, "REMOVED")])

    def test_watches_cancelled_mid_write_let_the_daemon_stop(self):
        # A watch stream cancelled while a write to it is in flight must
        # still complete on the server: a leaked one made SIGTERM wait
        # forever in the gRPC server's shutdown.
        d, inv, pl = self.start(None, "--heartbeat_timeout=0")
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=[cpu_node("c%d" % i, 64)
                                                        for i in range(8)]), timeout=10)
        stop = threading.Event()

        def churn():
            while not stop.is_set():
                pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                    bundles=[P.Bundle(resources={"CPU": 1})] * 4), timeout=10)
                pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
                    placement_group_id=pg.placement_group_id), timeout=10)
        churner = threading.Thread(target=churn)
        churner.start()
        streams = []
        try:
            for _ in range(5):
                watches = [grpc.insecure_channel("127.0.0.1:%d" % d.port)
                           for _ in range(20)]
                for c in watches:
                    streams.append((c, sliced_pb2_grpc.PlacementStub(c).WatchPlacementGroups(
                        P.WatchPlacementGroupsRequest())))
                time.sleep(0.3)  # events flow; the clients read none of them
                for c, stream in streams:
                    stream.cancel()
                    c.close()
                streams.clear()
        finally:
            stop.set()
            churner.join()
        d.proc.send_signal(signal.SIGTERM)
        try:
            d.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.fail("sliced did not stop within 15 s of SIGTERM after watches "
                      "were cancelled mid-write")
        self.assertEqual(d.proc.returncode, 0)

    def test_seed_jaxtrainer_example_gets_a_whole_slice_and_env(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4) + [cpu_node("cpu-0")])
        pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=SEED, job_id="job-1"), timeout=10)
        self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
        self.assertEqual(list(pg.slice_names), ["v6e-a"])
        self.assertEqual([w.rank for w in pg.workers], [0, 1, 2, 3])
        self.assertEqual([w.node_id for w in pg.workers], ["v6e-a-w%d" % i for i in range(4)])
        hostnames = ",".join("v6e-a-w%d.internal" % i for i in range(4))
        for w in pg.workers:
            self.assertEqual(w.env["TPU_WORKER_ID"], str(w.tpu_worker_id))
            self.assertEqual(w.env["TPU_WORKER_HOSTNAMES"], hostnames)
            self.assertEqual(w.env["TPU_NAME"], "v6e-a")
            self.assertNotIn("MEGASCALE_NUM_SLICES", w.env)
        slices = {s.name: s for s in inv.ListSlices(P.ListSlicesRequest(), timeout=10).slices}
        self.assertFalse(slices["v6e-a"].free)
        self.assertEqual(list(slices["v6e-a"].placement_group_ids), [pg.placement_group_id])
        node = inv.GetNode(P.GetNodeRequest(node_id="v6e-a-w0"), timeout=10)
        self.assertEqual(node.available["TPU"], 0)

    def test_a_basic_view_answers_with_the_id_state_and_reason_only(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4) + [cpu_node("cpu-0", 4)])
        # The default (and FULL) answers with the whole group.
        full = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1})], name="full"), timeout=10)
        self.assertEqual([b.node_id for b in full.bundles], ["cpu-0"])
        self.assertEqual(full.name, "full")
        self.assertTrue(full.HasField("create_time"))
        explicit = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1})], view=P.FULL), timeout=10)
        self.assertEqual([b.node_id for b in explicit.bundles], ["cpu-0"])

        basic = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1})], name="basic", job_id="j",
            view=P.BASIC), timeout=10)
        self.assertEqual(basic, P.PlacementGroup(
            placement_group_id=basic.placement_group_id, state=P.CREATED))
        # The group itself is whole: Get shows what FULL would have.
        got = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=basic.placement_group_id), timeout=10)
        self.assertEqual((got.name, got.job_id, [b.node_id for b in got.bundles]),
                         ("basic", "j", ["cpu-0"]))

        # A waiting group's reason comes with it.
        waiting = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 500})], view=P.BASIC), timeout=10)
        self.assertEqual(waiting.state, P.INFEASIBLE)
        self.assertIn("CPU", waiting.pending_reason)
        self.assertFalse(waiting.bundles)

        # SubmitScalingConfig takes it too: no workers in the reply, but Get
        # has them.
        pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=SEED, view=P.BASIC), timeout=10)
        self.assertEqual((pg.state, list(pg.workers), list(pg.slice_names)),
                         (P.CREATED, [], []))
        got = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        self.assertEqual(len(got.workers), 4)

        # A retry with the same request_id answers in the view it asks for.
        first = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1})], request_id="r1", view=P.BASIC),
            timeout=10)
        again = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1})], request_id="r1"), timeout=10)
        self.assertEqual(again.placement_group_id, first.placement_group_id)
        self.assertEqual(again.request_id, "r1")

        # An unknown view is refused by name, and nothing is created.
        before = len(pl.ListPlacementGroups(P.ListPlacementGroupsRequest(),
                                            timeout=10).placement_groups)
        for call, request in (
                (pl.CreatePlacementGroup, P.CreatePlacementGroupRequest(
                    bundles=[P.Bundle(resources={"CPU": 1})], view=7)),
                (pl.SubmitScalingConfig, P.SubmitScalingConfigRequest(
                    scaling_config=SEED, view=7))):
            with self.assertRaises(grpc.RpcError) as err:
                call(request, timeout=10)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual(err.exception.details(), "view: unknown value 7 (FULL or BASIC)")
        self.assertEqual(len(pl.ListPlacementGroups(P.ListPlacementGroupsRequest(),
                                                    timeout=10).placement_groups), before)

    def test_one_process_per_chip_fills_one_slice_four_per_host(self):
        # ScalingConfig(num_workers=16, use_tpu=True, topology="4x4",
        # accelerator_type="TPU-V6E", resources_per_worker={"TPU": 1}).
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4) + tpu_slice("v6e-b", 4))
        config = P.ScalingConfig(num_workers=16, use_tpu=True, topology="4x4",
                                 accelerator_type="TPU-V6E",
                                 resources_per_worker={"TPU": 1})
        pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=config, job_id="per-chip"), timeout=10)
        self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
        self.assertEqual(len(pg.slice_names), 1)
        name = pg.slice_names[0]
        self.assertEqual(len(pg.workers), 16)
        self.assertEqual(len(pg.bundles), 4)  # one bundle per host
        self.assertEqual({b.resources["TPU"] for b in pg.bundles}, {4.0})
        seen = set()
        for w in pg.workers:
            self.assertEqual(w.node_id, "%s-w%d" % (name, w.rank // 4))
            self.assertEqual(w.env["JAX_PROCESS_ID"], str(w.rank))
            self.assertEqual(w.env["TPU_VISIBLE_CHIPS"], str(w.rank % 4))
            self.assertEqual(w.env["TPU_PROCESS_BOUNDS"], "4,4,1")
            self.assertEqual(w.env["CLOUD_TPU_TASK_ID"], str(w.rank))
            seen.add((w.node_id, w.env["TPU_VISIBLE_CHIPS"]))
        self.assertEqual(len(seen), 16, "no chip is given twice")
        # The other slice stays whole and free.
        slices = {s.name: s for s in inv.ListSlices(P.ListSlicesRequest(), timeout=10).slices}
        other = "v6e-b" if name == "v6e-a" else "v6e-a"
        self.assertTrue(slices[other].free)

    def test_v7x_two_tpu_devices_per_chip(self):
        # Hosts advertising 2 TPU per chip (Ray's RAY_TPU_RESOURCE_PER_CHIP=2).
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        nodes = [P.Node(node_id="x-w%d" % w, address="x-w%d.internal" % w,
                        labels={"ray.io/accelerator-type": "TPU-V7X",
                                "ray.io/tpu-topology": "2x2x2",
                                "ray.io/tpu-slice-name": "x",
                                "ray.io/tpu-worker-id": str(w)},
                        resources={"CPU": 100, "TPU": 8}) for w in range(2)]
        self.register(inv, nodes)
        slices = inv.ListSlices(P.ListSlicesRequest(), timeout=10).slices
        self.assertTrue(slices[0].intact, slices[0].reason)
        config = P.ScalingConfig(num_workers=8, use_tpu=True, topology="2x2x2",
                                 accelerator_type="tpu7x", tpu_resource_per_chip=2,
                                 resources_per_worker={"TPU": 2})
        pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=config, job_id="v7x"), timeout=10)
        self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
        self.assertEqual(len(pg.workers), 8)
        self.assertEqual(pg.scaling_config.tpu_resource_per_chip, 2)
        self.assertEqual([w.env["TPU_VISIBLE_CHIPS"] for w in pg.workers[:4]],
                         ["0", "1", "2", "3"])
        with self.assertRaises(grpc.RpcError) as refused:
            pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
                scaling_config=P.ScalingConfig(
                    num_workers=4, use_tpu=True, topology="4x4",
                    accelerator_type="TPU-V6E", tpu_resource_per_chip=2)), timeout=10)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("tpu_resource_per_chip", refused.exception.details())

    def test_cpu_spread_bundles_keep_a_free_slice_whole(self):
        # Issue 13: four CPU-only SPREAD bundles, one CPU node, a free v6e 4x4.
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4) + [cpu_node("cpu-0", cpus=16)])
        pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1}) for _ in range(4)],
            strategy=P.SPREAD), timeout=10)
        self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
        self.assertEqual({b.node_id for b in pg.bundles}, {"cpu-0"})
        got = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED),
                                     timeout=10)
        self.assertEqual(got.state, P.CREATED, got.pending_reason)

    def test_cpu_bundles_that_must_use_a_whole_slice_say_so_across_a_restart(self):
        # Issue 13: when CPU-only bundles must land on a whole free slice, the
        # group and Explain say so, and the note is stored with the group.
        data = temp_data_dir(self)
        d, inv, pl = self.start(data, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4) + [cpu_node("cpu-0", cpus=16)])
        note = "2 CPU-only bundle(s) on whole free TPU capacity: no other node fits them"
        pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1}) for _ in range(3)],
            strategy=P.STRICT_SPREAD), timeout=10)
        self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
        self.assertEqual(pg.placement_note, note)
        spread = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1})], strategy=P.SPREAD), timeout=10)
        self.assertEqual(spread.placement_note, "")  # the CPU node holds it
        d.kill9()
        _, _, pl2 = self.start(data, "--heartbeat_timeout=0")
        again = pl2.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        self.assertEqual(again.placement_note, note)
        why = pl2.ExplainPlacementGroup(P.ExplainPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        self.assertTrue(why.summary.endswith("; " + note), why.summary)

    def test_two_slice_job_gets_megascale_env(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4) + tpu_slice("v6e-b", 4))
        cfg = P.ScalingConfig(num_workers=8, use_tpu=True, topology="4x4",
                              accelerator_type="v6e")
        pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=cfg), timeout=10)
        self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
        self.assertEqual(sorted(pg.slice_names), ["v6e-a", "v6e-b"])
        coordinator = pg.workers[0].address
        for w in pg.workers:
            self.assertEqual(w.rank, w.slice_index * 4 + w.tpu_worker_id)
            self.assertEqual(w.env["MEGASCALE_NUM_SLICES"], "2")
            self.assertEqual(w.env["MEGASCALE_SLICE_ID"], str(w.slice_index))
            self.assertEqual(w.env["MEGASCALE_PORT"], "8081")
            self.assertEqual(w.env["MEGASCALE_COORDINATOR_ADDRESS"], coordinator)

    def test_invalid_scaling_configs_get_rays_messages(self):
        _, _, pl = self.start(None, "--heartbeat_timeout=0")
        cases = [
            (P.ScalingConfig(num_workers=4, use_tpu=True, accelerator_type="TPU-V6E"),
             "`topology` must be specified in ScalingConfig when `use_tpu=True` and `num_workers` > 1"),
            (P.ScalingConfig(num_workers=1, use_tpu=True, use_gpu=True, topology="2x2",
                             accelerator_type="TPU-V6E"),
             "Cannot specify both `use_gpu=True` and `use_tpu=True`"),
            (P.ScalingConfig(num_workers=3, use_tpu=True, topology="4x4", accelerator_type="TPU-V6E"),
             "num_workers"),
            (P.ScalingConfig(num_workers=4, use_tpu=True, topology="3x3", accelerator_type="TPU-V6E"),
             "topology"),
            (P.ScalingConfig(num_workers=4, use_tpu=True, topology="4x4", accelerator_type="TPU-V9"),
             "accelerator_type"),
        ]
        for cfg, message in cases:
            with self.assertRaises(grpc.RpcError) as err:
                pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=cfg), timeout=10)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(message, err.exception.details())
        self.assertEqual(len(pl.ListPlacementGroups(P.ListPlacementGroupsRequest(),
                                                    timeout=10).placement_groups), 0)

    def test_pending_until_capacity_frees_seen_by_watch_and_explain(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4))
        first = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        second = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=SEED, request_id="retry-me"), timeout=10)
        self.assertEqual(second.state, P.PENDING)
        self.assertIn("v6e-16", second.pending_reason)
        again = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=SEED, request_id="retry-me"), timeout=10)
        self.assertEqual(again.placement_group_id, second.placement_group_id)
        explain = pl.ExplainPlacementGroup(P.ExplainPlacementGroupRequest(
            placement_group_id=second.placement_group_id), timeout=10)
        self.assertEqual(explain.outcome.lower(), "unschedulable")
        self.assertIn("held", explain.summary)
        placed = pl.ExplainPlacementGroup(P.ExplainPlacementGroupRequest(
            placement_group_id=first.placement_group_id), timeout=10)
        self.assertEqual(placed.outcome.lower(), "placed")
        self.assertIn("slices v6e-a", placed.summary)
        self.assertEqual([b.node_id for b in placed.bundles], ["v6e-a-w%d" % i for i in range(4)])
        dry = pl.ExplainPlacementGroup(P.ExplainPlacementGroupRequest(
            dry_run=P.CreatePlacementGroupRequest(bundles=[P.Bundle(resources={"TPU": 1})])),
            timeout=10)
        self.assertEqual(dry.outcome.lower(), "unschedulable")

        events = []
        stream = pl.WatchPlacementGroups(P.WatchPlacementGroupsRequest(
            placement_group_id=second.placement_group_id), timeout=20)

        def on_event(ev):
            events.append(ev.placement_group.state)
            return ev.placement_group.state == P.CREATED
        # Subscribed once the current state (PENDING) has arrived.
        t = first_event_then(stream, on_event)
        pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
            placement_group_id=first.placement_group_id), timeout=10)
        t.join(timeout=20)
        stream.cancel()
        self.assertEqual(events[0], P.PENDING)
        self.assertEqual(events[-1], P.CREATED)
        got = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=second.placement_group_id), timeout=10)
        self.assertEqual(got.state, P.CREATED)
        with self.assertRaises(grpc.RpcError) as err:
            pl.GetPlacementGroup(P.GetPlacementGroupRequest(
                placement_group_id=first.placement_group_id), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_infeasible_shape_and_remove_node_refusal(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4))
        cfg = P.ScalingConfig(num_workers=8, use_tpu=True, topology="4x8", accelerator_type="TPU-V6E")
        pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=cfg), timeout=10)
        self.assertEqual(pg.state, P.INFEASIBLE)
        # The state says INFEASIBLE; the reason only says why.
        self.assertTrue(pg.pending_reason.startswith("no v6e-32 slice"), pg.pending_reason)
        seed = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        self.assertEqual(seed.state, P.CREATED)
        with self.assertRaises(grpc.RpcError) as err:
            inv.RemoveNode(P.RemoveNodeRequest(node_id="v6e-a-w1"), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn(seed.placement_group_id, err.exception.details())
        self.assertIn("--force", err.exception.details())
        with self.assertRaises(grpc.RpcError) as err:
            pl.ListPlacementGroups(P.ListPlacementGroupsRequest(state=P.REMOVED), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("REMOVED groups are not kept", err.exception.details())
        # The inventory gains the shape: the infeasible group is placed.
        self.register(inv, tpu_slice("v6e-big", 8, topology="4x8"))
        got = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        self.assertEqual(got.state, P.CREATED, got.pending_reason)
        self.assertEqual(list(got.slice_names), ["v6e-big"])

    def test_list_pages_through_the_groups_of_a_job(self):
        d, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, [cpu_node("c1", cpus=64)])
        ids = {"a": [], "b": []}
        for i in range(10):
            job = "a" if i % 3 else "b"
            pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                job_id=job, bundles=[P.Bundle(resources={"CPU": 1})]), timeout=10)
            ids[job].append(pg.placement_group_id)
        seen, token, pages = [], "", 0
        while True:
            page = pl.ListPlacementGroups(P.ListPlacementGroupsRequest(
                job_id="a", page_size=3, page_token=token), timeout=10)
            self.assertLessEqual(len(page.placement_groups), 3)
            seen += [g.placement_group_id for g in page.placement_groups]
            pages += 1
            token = page.next_page_token
            if not token:
                break
        self.assertEqual(seen, sorted(ids["a"]))
        self.assertEqual(len(seen), 6)
        self.assertEqual(pages, 2)  # 3 + 3: a full last page has no token
        # The default page holds them all; the Python client follows pages.
        whole = pl.ListPlacementGroups(P.ListPlacementGroupsRequest(), timeout=10)
        self.assertEqual(len(whole.placement_groups), 10)
        self.assertEqual(whole.next_page_token, "")
        with Client("127.0.0.1:%d" % d.port) as client:
            self.assertEqual(sorted(g.id for g in client.placement_groups(job_id="b")),
                             sorted(ids["b"]))
        for bad in (-1, 5001):
            with self.assertRaises(grpc.RpcError) as err:
                pl.ListPlacementGroups(P.ListPlacementGroupsRequest(page_size=bad), timeout=10)
            self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("page_size: must be 0..5000", err.exception.details())

    def test_compute_class_falls_back_in_order(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, [
            cpu_node("spot-1", 8, **{"cloud.google.com/gke-spot": "true"}),
            cpu_node("flex-1", 8, **{"cloud.google.com/gke-flex-start": "true"}),
            cpu_node("res-1", 8, **{"cloud.google.com/reservation-name": "r"})])
        tier = "sliced.io/capacity-tier"
        inv.PutComputeClass(P.PutComputeClassRequest(compute_class=P.ComputeClass(
            name="cost-optimized",
            priorities=[P.ComputeClass.Priority(label_selector={tier: t})
                        for t in ("spot", "flex-start", "reserved")])), timeout=10)
        used = []
        for _ in range(3):
            pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                bundles=[P.Bundle(resources={"CPU": 8})], compute_class="cost-optimized"),
                timeout=10)
            self.assertEqual(pg.state, P.CREATED, pg.pending_reason)
            used.append((pg.bundles[0].node_id, pg.priority_index))
        self.assertEqual(used, [("spot-1", 0), ("flex-1", 1), ("res-1", 2)])
        inv.PutComputeClass(P.PutComputeClassRequest(compute_class=P.ComputeClass(
            name="strict", when_unsatisfiable=P.FAIL,
            priorities=[P.ComputeClass.Priority(label_selector={tier: "spot"})])), timeout=10)
        with self.assertRaises(grpc.RpcError) as err:
            pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                bundles=[P.Bundle(resources={"CPU": 1})], compute_class="strict"), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(grpc.RpcError) as err:
            inv.DeleteComputeClass(P.DeleteComputeClassRequest(name="cost-optimized"), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)

    def test_lost_host_moves_slice_job_to_another_slice(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=1s")
        nodes = tpu_slice("v6e-a", 4) + tpu_slice("v6e-b", 4)
        self.register(inv, nodes)
        stop = threading.Event()

        def beat():  # every node but v6e-?-w2 of the slice the job lands on
            while not stop.is_set():
                alive = [n.node_id for n in nodes if n.node_id != victim[0]]
                inv.Heartbeat(P.HeartbeatRequest(heartbeats=[
                    P.NodeHeartbeat(node_id=i) for i in alive]), timeout=10)
                stop.wait(0.2)  # an agent's beat period, not a wait for an event
        victim = [None]
        t = threading.Thread(target=beat)
        t.start()
        self.addCleanup(lambda: (stop.set(), t.join()))
        pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        self.assertEqual(pg.state, P.CREATED)
        first_slice = pg.slice_names[0]
        seen = []
        stream = pl.WatchPlacementGroups(P.WatchPlacementGroupsRequest(
            placement_group_id=pg.placement_group_id), timeout=30)

        def on_event(ev):  # until it is CREATED on another slice
            seen.append((ev.placement_group.state, tuple(ev.placement_group.slice_names)))
            return (ev.placement_group.state == P.CREATED and
                    ev.placement_group.slice_names[0] != first_slice)
        watcher = first_event_then(stream, on_event)
        self.addCleanup(stream.cancel)
        victim[0] = first_slice + "-w2"
        watcher.join(timeout=30)
        got = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        self.assertEqual(got.state, P.CREATED, got.pending_reason)
        self.assertNotEqual(got.slice_names[0], first_slice)
        self.assertEqual(got.workers[0].env["TPU_NAME"], got.slice_names[0])
        slices = {s.name: s for s in inv.ListSlices(P.ListSlicesRequest(), timeout=10).slices}
        self.assertFalse(slices[first_slice].intact)
        self.assertEqual(list(slices[first_slice].placement_group_ids), [])
        states = [state for state, _ in seen]
        self.assertEqual(states[0], P.CREATED)  # the current state first
        self.assertIn(P.RESCHEDULING, states)
        self.assertEqual(seen[-1], (P.CREATED, tuple(got.slice_names)))

    def test_placements_survive_kill_9(self):
        data = temp_data_dir(self)
        d, inv, pl = self.start(data, "--heartbeat_timeout=0")
        self.register(inv, tpu_slice("v6e-a", 4) + [cpu_node("cpu-%d" % i) for i in range(4)])
        tpu = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        cpu = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 8}) for _ in range(4)],
            strategy=P.STRICT_SPREAD, job_id="j"), timeout=10)
        self.assertEqual(cpu.state, P.CREATED)
        d.kill9()
        _, inv2, pl2 = self.start(data, "--heartbeat_timeout=0")
        for before in (tpu, cpu):
            after = pl2.GetPlacementGroup(P.GetPlacementGroupRequest(
                placement_group_id=before.placement_group_id), timeout=10)
            self.assertEqual(after.state, P.CREATED)
            self.assertEqual([b.node_id for b in after.bundles], [b.node_id for b in before.bundles])
        self.assertEqual(inv2.GetNode(P.GetNodeRequest(node_id="cpu-0"), timeout=10).available["CPU"], 8)
        # Capacity is still held: another whole slice does not fit.
        again = pl2.SubmitScalingConfig(P.SubmitScalingConfigRequest(scaling_config=SEED), timeout=10)
        self.assertEqual(again.state, P.PENDING)


    def test_backfill_until_the_starvation_bound_then_the_big_job_claims_capacity(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=0", "--starvation_bound=1s")
        self.register(inv, tpu_slice("v6e-a", 4) + tpu_slice("v6e-b", 4))
        submit = lambda n: pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
            scaling_config=P.ScalingConfig(num_workers=n, use_tpu=True, topology="4x4",
                                           accelerator_type="TPU-V6E")), timeout=10)
        remove = lambda pg: pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        get = lambda pg: pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=pg.placement_group_id), timeout=10)
        a = submit(4)
        big = submit(8)
        self.assertEqual(big.state, P.PENDING)
        small = submit(4)  # backfills the free slice while big is young
        self.assertEqual(small.state, P.CREATED)
        remove(small)
        self.assertEqual(get(big).state, P.PENDING)  # one slice free, needs two
        # Starving is big's age passing --starvation_bound on the daemon's
        # clock: no event announces it and no read-only call shows it (a
        # probing submit would take the free slice), so wait until the
        # daemon's own create time of big plus the bound has passed.
        starves_at = get(big).create_time.ToNanoseconds() / 1e9 + 1.0
        wait_until(lambda: time.time() > starves_at + 0.05, timeout=10,
                   what="big's age to pass the starvation bound")
        late = submit(4)  # big has starved: the free slice is kept for it
        self.assertEqual(late.state, P.PENDING)
        self.assertIn(big.placement_group_id, late.pending_reason)
        remove(a)
        self.assertEqual(get(big).state, P.CREATED)
        self.assertEqual(get(late).state, P.PENDING)

    def test_drained_node_takes_no_new_bundles(self):
        _, inv, pl = self.start(None, "--heartbeat_timeout=0")
        self.register(inv, [cpu_node("a", 8), cpu_node("b", 8)])
        inv.DrainNode(P.DrainNodeRequest(node_id="a"), timeout=10)
        pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 4}) for _ in range(2)]), timeout=10)
        self.assertEqual([b.node_id for b in pg.bundles], ["b", "b"])
        spread = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 1}) for _ in range(2)],
            strategy=P.STRICT_SPREAD), timeout=10)
        self.assertEqual(spread.state, P.PENDING)  # a drained node may come back
        big = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
            bundles=[P.Bundle(resources={"CPU": 8})]), timeout=10)
        self.assertEqual(big.state, P.PENDING)  # b is full, a drained
        # Undrained, it takes bundles again: the queue is re-tried at once.
        node = inv.UndrainNode(P.UndrainNodeRequest(node_id="a"), timeout=10).node
        self.assertEqual(node.state, P.ALIVE)
        got = pl.GetPlacementGroup(P.GetPlacementGroupRequest(
            placement_group_id=big.placement_group_id), timeout=10)
        self.assertEqual(got.state, P.CREATED, got.pending_reason)
        self.assertEqual([b.node_id for b in got.bundles], ["a"])
        # A no-op on an ALIVE node.
        self.assertEqual(inv.UndrainNode(P.UndrainNodeRequest(node_id="a"),
                                         timeout=10).node.state, P.ALIVE)


if __name__ == "__main__":
    unittest.main()
