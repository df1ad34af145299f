"""End to end: node agents (`python3 -m sliced_agent`) on simulated hosts
keep their nodes ALIVE through the lease, a killed agent's node goes DEAD
and its slice's group RESCHEDULING, a restarted daemon gets every node back
with no manual step, and SIGUSR1 drains. Lease: 2 s."""
import signal
import time
import unittest

from agent_testlib import (Agent, base_dir, host, node_states, start_daemon, wait_states,
                           wait_until)
from sliced_testlib import temp_data_dir
from sliced_client import Client, ScalingConfig

V4 = ScalingConfig(use_tpu=True, num_workers=2, topology="2x2x2", accelerator_type="TPU-V4")
NODES = ["sim-v4-0-w0", "sim-v4-0-w1", "sim-cpu-0"]


class AgentLeaseEndToEnd(unittest.TestCase):
    def start_fleet(self, daemon):
        base = base_dir(self)
        server = "127.0.0.1:%d" % daemon.port
        hosts = [host(self, base, "sim-v4-0-w%d" % w, "v4", "2x2x2", "sim-v4-0", w)
                 for w in range(2)]
        agents = [Agent(self, server, h) for h in hosts]
        agents.append(Agent(self, server, host(self, base, "sim-cpu-0"),
                            "--node_id", "sim-cpu-0", "--cpu", "8"))
        for a in agents:
            a.wait_for("heartbeating every")
        return agents

    def test_nodes_stay_alive_and_a_dead_agent_reschedules_its_slice(self):
        d = start_daemon(self, temp_data_dir(self))
        agents = self.start_fleet(d)
        self.assertEqual(node_states(d.port), dict.fromkeys(NODES, "ALIVE"))
        with Client("127.0.0.1:%d" % d.port) as client:
            pg = client.wait_ready(client.submit(V4, job_id="lease"), timeout=10)
            self.assertEqual(sorted(w.node_id for w in pg.workers), NODES[:2])
            # Three lease periods, checked all along: every node stays ALIVE.
            end = time.monotonic() + 6.5
            while time.monotonic() < end:
                self.assertEqual(set(node_states(d.port).values()), {"ALIVE"})
                time.sleep(0.25)
            self.assertEqual(client.get(pg).state, "CREATED")
            node = client.node("sim-v4-0-w0")
            self.assertEqual(node.labels["sliced.io/tpu-host-coords"], "0-0-0")
            self.assertEqual(node.resources["TPU-v4-16-head"], 1)
            self.assertEqual(client.node("sim-v4-0-w1").labels["sliced.io/tpu-host-coords"],
                             "0-0-1")
            agents[1].kill()
            wait_states(d.port, {"sim-v4-0-w1": "DEAD", "sim-v4-0-w0": "ALIVE"}, timeout=15)
            wait_until(lambda: client.get(pg).state == "RESCHEDULING", 10,
                       "the group to be RESCHEDULING")

    def test_a_restarted_daemon_gets_every_node_back(self):
        data = temp_data_dir(self)
        d = start_daemon(self, data)
        agents = self.start_fleet(d)
        for a in agents:
            a.mark()
        d.kill9()
        for a in agents:
            a.wait_for("heartbeat failed .*UNAVAILABLE")
            a.mark()
        time.sleep(1)  # a short outage, as a daemon restart is
        d2 = start_daemon(self, data, d.port)
        for a in agents:
            a.wait_for("daemon answers again")
            a.wait_for("registered")  # again: the daemon may have lost it
        wait_states(d2.port, dict.fromkeys(NODES, "ALIVE"))
        with Client("127.0.0.1:%d" % d2.port) as client:
            for n in NODES:  # heartbeats reached the new process
                self.assertTrue(client.node(n).state == "ALIVE")
        end = time.monotonic() + 4.5  # and they keep coming
        while time.monotonic() < end:
            self.assertEqual(set(node_states(d2.port).values()), {"ALIVE"})
            time.sleep(0.25)

    def test_sigusr1_drains_the_node(self):
        d = start_daemon(self, temp_data_dir(self))
        agents = self.start_fleet(d)
        agents[0].signal(signal.SIGUSR1)
        agents[0].wait_for("node is DRAINING")
        wait_states(d.port, {"sim-v4-0-w0": "DRAINING", "sim-v4-0-w1": "ALIVE"})
        time.sleep(2.5)  # the agent heartbeats on; the node stays DRAINING
        self.assertEqual(node_states(d.port)["sim-v4-0-w0"], "DRAINING")


if __name__ == "__main__":
    unittest.main()
