"""End to end: priority preemption over real gRPC, RocksDB and the Python
client. A production ScalingConfig on a full cluster preempts exactly the
minimal set, the victim's owner is told (callback), the daemon is killed
with -9 in the grace period, and after the grace the victim is requeued and
the preemptor CREATED on its slice; /metrics counts it."""
import os
import re
import sys
import threading
import time
import unittest
import urllib.request

import grpc

from sliced_testlib import (REPO, Daemon, sliced_pb2, sliced_pb2_grpc, temp_data_dir,
                            wait_until)

sys.path.insert(0, os.path.join(REPO, "client", "python"))
from sliced_client import Client, ScalingConfig  # noqa: E402

P = sliced_pb2
GRACE_S = 6
FLAGS = ("--heartbeat_timeout=0", "--preemption_grace=%ds" % GRACE_S,
         "--preemption_cooldown=0s")
V6E = ScalingConfig(use_tpu=True, num_workers=4, topology="4x4", accelerator_type="TPU-V6E")


def v6e_slice(name):
    return [P.Node(node_id="%s-w%d" % (name, w), address="%s-w%d.internal" % (name, w),
                   labels={"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                           "cloud.google.com/gke-tpu-topology": "4x4",
                           "TPU_NAME": name, "TPU_WORKER_ID": str(w)},
                   resources={"CPU": 100, "TPU": 4})
            for w in range(4)]


class PreemptionEndToEnd(unittest.TestCase):
    def start(self, data):
        d = Daemon(data, *FLAGS).start()
        self.addCleanup(d.close)
        client = Client("127.0.0.1:%d" % d.port)
        self.addCleanup(client.close)
        return d, client

    def metric(self, d, name, **labels):
        port = int(d.banner.split("metrics on port ")[1].split()[0].rstrip(","))
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                      timeout=10).read().decode()
        want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
        m = re.search(r"^%s\{%s\} (\S+)$" % (name, re.escape(want)), text, re.M)
        return float(m.group(1)) if m else 0.0

    def test_production_preempts_the_minimal_set_through_kill_9(self):
        data = temp_data_dir(self)
        d, client = self.start(data)
        with grpc.insecure_channel("127.0.0.1:%d" % d.port) as ch:
            sliced_pb2_grpc.InventoryStub(ch).RegisterNodes(P.RegisterNodesRequest(
                nodes=v6e_slice("s1") + v6e_slice("s2") + v6e_slice("s3")), timeout=10)
        # s1 held by two best-effort halves, then one best-effort group and
        # one batch group on a whole slice each: the minimal set for a
        # production slice is the single best-effort group, not the halves.
        halves = [client.create_placement_group(
            [{"TPU": 4}] * 2, "STRICT_SPREAD", bundle_label_selector=[{"TPU_NAME": "s1"}] * 2,
            job_id="halves") for _ in range(2)]
        research = client.submit(V6E, job_id="research")  # best-effort
        batch = [client.submit(V6E, job_id="batch", priority_class="batch")]
        for pg in halves + [research] + batch:
            self.assertEqual(pg.state, "CREATED", pg)
        self.assertEqual(client.explain(V6E).outcome, "UNSCHEDULABLE")
        research_slice = research.slice_names

        # The dry run names the victim before anything happens.
        dry = client.explain(V6E, priority_class="production")
        self.assertEqual(dry.outcome, "UNSCHEDULABLE")
        self.assertIn("preemption: preempting 1 group(s) of priority <= 0 makes room: "
                      + research.id, dry.details[-1])

        notices, told = [], threading.Event()

        def checkpoint(pg):
            notices.append(pg)
            told.set()
        listener = client.on_preempted(checkpoint, job_id="research")
        self.addCleanup(listener.stop)

        prod = client.submit(V6E, job_id="serving", priority_class="production")
        self.assertEqual(prod.state, "PENDING", prod)
        self.assertEqual(prod.preempting, [research.id])
        self.assertTrue(told.wait(10), "no preemption notice")
        notice = notices[0]
        self.assertEqual((notice.id, notice.state, notice.preempted_by),
                         (research.id, "PREEMPTING", prod.id))
        self.assertAlmostEqual(notice.preemption_deadline, time.time() + GRACE_S, delta=3)
        # Still running: its workers are still there.
        self.assertEqual(len(notice.workers), 4)
        for pg in halves + batch:
            self.assertEqual(client.get(pg).state, "CREATED")

        # kill -9 within the grace period; the restart resumes it.
        listener.stop()
        d.kill9()
        client.close()
        d, client = self.start(data)
        victim = client.get(research)
        self.assertEqual(victim.state, "PREEMPTING")
        self.assertEqual(victim.preemption_deadline, notice.preemption_deadline)
        self.assertEqual(client.get(prod).preempting, [research.id])

        wait_until(lambda: client.get(prod).state == "CREATED", timeout=GRACE_S + 10,
                   what="the preemptor to be placed after the grace")
        placed = client.get(prod)
        self.assertEqual(placed.slice_names, research_slice)
        self.assertEqual(len(placed.workers), 4)
        requeued = client.get(research)
        self.assertEqual((requeued.state, requeued.preempted_by), ("PENDING", prod.id))
        for pg in halves + batch:
            self.assertEqual(client.get(pg).state, "CREATED")
        self.assertEqual(self.metric(d, "sliced_preemptions_total",
                                     priority_class="best-effort", outcome="requeued"), 1)

    def test_bad_preemption_fields_are_refused_naming_the_field(self):
        d, client = self.start(temp_data_dir(self))
        with grpc.insecure_channel("127.0.0.1:%d" % d.port) as ch:
            stub = sliced_pb2_grpc.PlacementStub(ch)
            for field in ("preemption_policy", "on_preemption"):
                with self.assertRaises(grpc.RpcError) as e:
                    stub.SubmitScalingConfig(P.SubmitScalingConfigRequest(
                        scaling_config=P.ScalingConfig(
                            num_workers=4, use_tpu=True, topology="4x4",
                            accelerator_type="TPU-V6E"),
                        **{field: 7}), timeout=10)
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertTrue(e.exception.details().startswith(field + ": unknown value 7"),
                                e.exception.details())
            self.assertEqual(len(stub.ListPlacementGroups(
                P.ListPlacementGroupsRequest(), timeout=10).placement_groups), 0)
        with self.assertRaises(ValueError):
            client.submit(V6E, preemption_policy="SOMETIMES")


if __name__ == "__main__":
    unittest.main()
