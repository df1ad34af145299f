"""Crash loop: several clients create and remove placement groups while the
daemon is SIGKILLed at random moments, again and again. After every restart an
external check of the whole history: every acknowledged create is back on the
same nodes, every acknowledged remove is gone, nothing unacknowledged is half
applied, and no node holds more than its capacity."""
import os
import random
import threading
import unittest

import grpc

from sliced_testlib import Daemon, list_all_groups, sliced_pb2, sliced_pb2_grpc, temp_data_dir
from test_placement_e2e import SEED, cpu_node, tpu_slice

P = sliced_pb2
ROUNDS = 4
CLIENTS = 6


class History:
    def __init__(self):
        self.lock = threading.Condition()  # notified at every acknowledgement
        self.created = {}        # id -> PlacementGroup as acknowledged
        self.remove_sent = set()  # a remove in flight at a crash may or may not apply
        self.removed = set()     # acknowledged removes

    def acks(self):
        return len(self.created) + len(self.removed)


def client(d, k, history, stop, round_no):
    with d.channel() as ch:
        pl = sliced_pb2_grpc.PlacementStub(ch)
        i = 0
        while not stop.is_set():
            i += 1
            rid = "r%d-c%d-%d" % (round_no, k, i)
            try:
                if k % 2 == 0:
                    pg = pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                        bundles=[P.Bundle(resources={"CPU": 2}) for _ in range(2)],
                        strategy=P.SPREAD, request_id=rid), timeout=5)
                else:
                    pg = pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
                        scaling_config=SEED, request_id=rid), timeout=5)
                with history.lock:
                    history.created[pg.placement_group_id] = pg
                    history.lock.notify_all()
                if i % 3 == 0:
                    with history.lock:
                        history.remove_sent.add(pg.placement_group_id)
                    pl.RemovePlacementGroup(P.RemovePlacementGroupRequest(
                        placement_group_id=pg.placement_group_id), timeout=5)
                    with history.lock:
                        history.removed.add(pg.placement_group_id)
                        history.lock.notify_all()
            except grpc.RpcError:
                return  # the daemon died under us


def check_history(test, inv, pl, history, max_unknown):
    """Checks the live state against `history`: acknowledged creates there
    (on the same nodes), acknowledged removes gone, at most `max_unknown`
    unacknowledged creates and only whole, no node over capacity. Returns the
    number of live groups."""
    live = {pg.placement_group_id: pg for pg in list_all_groups(pl)}
    for pg_id, acked in history.created.items():
        if pg_id in history.removed:
            test.assertNotIn(pg_id, live)
        elif pg_id in history.remove_sent and pg_id not in live:
            continue
        else:
            test.assertIn(pg_id, live)
            if acked.state == P.CREATED and live[pg_id].state == P.CREATED:
                test.assertEqual([b.node_id for b in live[pg_id].bundles],
                                 [b.node_id for b in acked.bundles])
    # Unacknowledged creates (in flight at a crash) may exist, at most one
    # per client per crash, and only whole: placed on every bundle or none.
    unknown = [pg for pg_id, pg in live.items() if pg_id not in history.created]
    test.assertLessEqual(len(unknown), max_unknown)
    for pg in live.values():
        placed = [bool(b.node_id) for b in pg.bundles]
        if pg.state == P.CREATED:
            test.assertTrue(placed and all(placed), pg)
        else:
            test.assertFalse(any(placed), pg)
    held = {}
    for pg in live.values():
        if pg.state != P.CREATED:
            continue
        for b in pg.bundles:
            for r, v in b.resources.items():
                held[(b.node_id, r)] = held.get((b.node_id, r), 0) + v
    for n in inv.ListNodes(P.ListNodesRequest(), timeout=10).nodes:
        for r, total in n.resources.items():
            used = held.get((n.node_id, r), 0)
            test.assertLessEqual(used, total, (n.node_id, r))
            test.assertAlmostEqual(n.available[r], total - used)
    return len(live)


class CrashLoop(unittest.TestCase):
    def test_repeated_kill_9_under_load(self):
        rng = random.Random(20261121)
        data = temp_data_dir(self)
        history = History()
        nodes = [cpu_node("c-%02d" % i, 8) for i in range(16)]
        for s in range(4):
            nodes += tpu_slice("s%d" % s, 4)
        for round_no in range(ROUNDS + 1):
            d = Daemon(data, "--heartbeat_timeout=0").start()
            self.addCleanup(d.close)
            with d.channel() as ch:
                inv = sliced_pb2_grpc.InventoryStub(ch)
                pl = sliced_pb2_grpc.PlacementStub(ch)
                if round_no == 0:
                    inv.RegisterNodes(P.RegisterNodesRequest(nodes=nodes), timeout=10)
                check_history(self, inv, pl, history, CLIENTS * ROUNDS)
            if round_no == ROUNDS:
                break
            stop = threading.Event()
            threads = [threading.Thread(target=client, args=(d, k, history, stop, round_no))
                       for k in range(CLIENTS)]
            # Kill at a random moment of the load: after a random number of
            # acknowledged operations in this round.
            with history.lock:
                target = history.acks() + rng.randint(300, 1200)
            for t in threads:
                t.start()
            with history.lock:
                self.assertTrue(history.lock.wait_for(
                    lambda: history.acks() >= target, timeout=60))
            d.kill9()
            stop.set()
            for t in threads:
                t.join(timeout=20)
        self.assertGreater(len(history.created), 20)
        self.assertGreater(len(history.removed), 5)

    def test_kill_9_loop_without_writes_leaves_one_log(self):
        """A daemon killed before it writes anything (a crash loop at start)
        leaves no write-ahead log behind: RocksDB 7.8 alone kept one empty
        .log file per start, and read them all at every later start."""
        data = temp_data_dir(self)
        for _ in range(5):
            d = Daemon(data, "--heartbeat_timeout=0").start()
            self.addCleanup(d.close)
            logs = [f for f in os.listdir(data) if f.endswith(".log")]
            self.assertEqual(len(logs), 1, logs)
            d.kill9()


if __name__ == "__main__":
    unittest.main()
