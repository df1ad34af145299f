"""End to end: the node agent and its host. Bad host facts exit 2 naming
their source; the metadata server is asked only on GCE or through
GCE_METADATA_HOST (never off loopback here: a guard refuses and reports any
other connect); maintenance and preemption notices drain; an unhealthy host
is reported (quarantine); TLS and bearer tokens as the client takes them."""
import hashlib
import hmac
import os
import subprocess
import sys
import time
import unittest

from agent_testlib import (CLIENT_DIR, GUARD, Agent, FakeMetadata, base_dir, free_port, host,
                           start_daemon, wait_states, wait_until)
from sliced_testlib import Daemon, temp_data_dir
from sliced_client import Client


def run_agent(env, *args, root=None, timeout=30):
    """Runs an agent that should exit at once (bad facts); returns it."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("TPU_") and k != "GCE_METADATA_HOST"}
    clean.update(PYTHONPATH=CLIENT_DIR, **env)
    return subprocess.run(
        [sys.executable, "-c", GUARD, "--server", "127.0.0.1:%d" % free_port(),
         "--metrics_port", "0", "--root", root or "/nonexistent"] + list(args),
        env=clean, capture_output=True, text=True, timeout=timeout)


def product_name(root, name):
    d = os.path.join(root, "sys", "class", "dmi", "id")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "product_name"), "w") as f:
        f.write(name + "\n")


class AgentHostEndToEnd(unittest.TestCase):
    def metadata(self, values):
        md = FakeMetadata(values, max_wait=1.0)
        self.addCleanup(md.stop)
        return md

    def test_bad_host_facts_exit_2_naming_their_source(self):
        r = run_agent({"TPU_ACCELERATOR_TYPE": "v6e-15x"})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("sliced-agent: cannot detect the host: TPU_ACCELERATOR_TYPE: invalid TPU "
                      "accelerator type 'v6e-15x'", r.stderr)
        md = self.metadata({"instance/attributes/accelerator-type": "v4-8",
                            "instance/attributes/tpu-env": "WORKER_ID = 0\n"})
        r = run_agent({"GCE_METADATA_HOST": md.address})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("metadata instance/attributes/tpu-env: line 1 is not KEY: 'value'",
                      r.stderr)
        r = run_agent({"GCE_METADATA_HOST": "127.0.0.1:%d" % free_port()})
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("metadata instance/attributes/accelerator-type: ", r.stderr)
        self.assertNotIn("NON-LOOPBACK", r.stderr)

    def test_the_metadata_server_is_asked_only_on_gce(self):
        d = start_daemon(self, temp_data_dir(self))
        root = base_dir(self)
        product_name(root, "Standard PC (Q35 + ICH9, 2009)")
        agent = Agent(self, "127.0.0.1:%d" % d.port, None, "--root", root, "--node_id", "cpu-x",
                      guard=True)
        agent.wait_for("not on GCE: no metadata server")
        agent.wait_for("heartbeating every")
        time.sleep(1.5)  # two more beats, a health check and a metrics poll
        self.assertNotIn("NON-LOOPBACK", agent.text())
        # The guard does catch it: "on GCE" with no override, the agent would
        # ask 169.254.169.254 (refused here before any packet leaves).
        product_name(root, "Google Compute Engine")
        r = run_agent({}, root=root)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("NON-LOOPBACK CONNECT ('169.254.169.254', 80)", r.stderr)
        self.assertIn("metadata instance/attributes/accelerator-type: blocked by the test",
                      r.stderr)

    def test_maintenance_and_preemption_notices_drain(self):
        d = start_daemon(self, temp_data_dir(self))
        base = base_dir(self)
        agents = []
        for w in range(2):
            # The second answers a long poll only on a change of its key, or
            # after 60 s, as GCE's server does.
            md = self.metadata({}) if w == 0 else FakeMetadata({}, max_wait=60.0)
            if w == 1:
                self.addCleanup(md.stop)
            h = host(self, base, "sim-v4-0-w%d" % w, "v4", "2x2x2", "sim-v4-0", w)
            agents.append((md, Agent(self, "127.0.0.1:%d" % d.port, h,
                                     env={"GCE_METADATA_HOST": md.address}, guard=True)))
        for md, agent in agents:
            agent.wait_for("watching GCE maintenance and preemption notices")
            agent.wait_for("heartbeating every")
        agents[0][0].set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        agents[0][1].wait_for("draining: maintenance-event=TERMINATE_ON_HOST_MAINTENANCE")
        wait_states(d.port, {"sim-v4-0-w0": "DRAINING", "sim-v4-0-w1": "ALIVE"})
        # A VM that lives through its maintenance, undrained, is drained
        # again at its next notice: the agent watches on.
        agents[0][0].set("instance/maintenance-event", "NONE")
        with Client("127.0.0.1:%d" % d.port) as client:
            client.undrain("sim-v4-0-w0")
        wait_states(d.port, {"sim-v4-0-w0": "ALIVE"})
        agents[0][1].mark()
        agents[0][0].set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
        agents[0][1].wait_for("draining: maintenance-event=MIGRATE_ON_HOST_MAINTENANCE")
        wait_states(d.port, {"sim-v4-0-w0": "DRAINING"})
        # Only the preemption notice changes (GCE gives the VM 30 s): it
        # must be seen at once, not after the maintenance key's long poll.
        agents[1][0].set("instance/preempted", "TRUE")
        agents[1][1].wait_for("draining: preempted=TRUE", timeout=10)
        wait_states(d.port, {"sim-v4-0-w1": "DRAINING"})
        for md, agent in agents:
            self.assertTrue(any("wait_for_change=true" in p for p in md.requests))
            self.assertNotIn("NON-LOOPBACK", agent.text())

    def test_an_unhealthy_host_is_reported(self):
        d = start_daemon(self, temp_data_dir(self))
        h = host(self, base_dir(self), "sim-v6e-0-w0", "v6e", "2x2", "sim-v6e-0", 0)
        agent = Agent(self, "127.0.0.1:%d" % d.port, h)
        agent.wait_for(": healthy")
        agent.mark()
        h.hold_device(4242, "/dev/accel0", "python3")
        h.waves.set_error("slice.error.detected.gauge", 1)
        problems = ("slice.error.detected.gauge=1 (libtpu); /dev/accel0 held by pid 4242 "
                    "(python3), which no placement owns")
        agent.wait_for("unhealthy: " + problems.replace("(", r"\(").replace(")", r"\)"))
        with Client("127.0.0.1:%d" % d.port) as client:
            # The next heartbeat carries it: the daemon quarantines the node.
            wait_until(lambda: client.node(h.name).quarantine_reason, 10,
                       "the node to be quarantined")
            self.assertEqual(client.node(h.name).quarantine_reason, problems)
            os.unlink(os.path.join(h.root, "proc", "4242", "fd", "3"))
            h.waves.set_error("slice.error.detected.gauge", 0)
            agent.mark()
            agent.wait_for(": healthy")
            wait_until(lambda: not client.node(h.name).quarantine_reason, 10,
                       "the quarantine to lift")

    def test_tls_and_tokens_as_the_client_takes_them(self):
        from test_slicectl_e2e import start_secure_daemon
        d, pki, token_files = start_secure_daemon(self, mutual_tls=True)
        h = host(self, base_dir(self), "sim-v6e-0-w0", "v6e", "2x2", "sim-v6e-0", 0)
        server = "127.0.0.1:%d" % d.port
        tls = ["--tls_ca", pki["ca.pem"], "--tls_cert", pki["client.pem"],
               "--tls_key", pki["client.key"]]
        agent = Agent(self, server, h, *tls, "--token_file", token_files["admin"])
        agent.wait_for("heartbeating every")
        h.write_log("hello")
        agent.wait_for("shipping libtpu logs")
        # The agent token of start_secure_daemon speaks for node "n1".
        n1 = Agent(self, server, host(self, base_dir(self), "n1"), "--node_id", "n1",
                   *tls, "--token_file", token_files["agent"])
        # Without the client certificate the handshake fails: no heartbeat.
        Agent(self, server, host(self, base_dir(self), "n2"), "--node_id", "n2",
              "--tls_ca", pki["ca.pem"], "--token_file", token_files["admin"]).wait_for(
            "heartbeat failed \\(UNAVAILABLE")
        # An agent token registers and heartbeats its own node (NodeRestriction).
        n1.wait_for("heartbeating every")

    def test_per_node_hmac_tokens(self):
        secret = os.path.join(base_dir(self), "secret")
        with open(secret, "wb") as f:
            f.write(b"s3cret-for-the-test-0123456789abcdef")
        d = Daemon(temp_data_dir(self), "--heartbeat_timeout=2s",
                   "--agent_token_secret_file=" + secret)
        self.addCleanup(d.close)
        d.start()
        h = host(self, base_dir(self), "sim-v6e-0-w0", "v6e", "2x2", "sim-v6e-0", 0)
        token = "%s.%s" % (h.name, hmac.new(b"s3cret-for-the-test-0123456789abcdef",
                                            h.name.encode(),
                                            hashlib.sha256).hexdigest())
        agent = Agent(self, "127.0.0.1:%d" % d.port, h, "--token", token)
        agent.wait_for("heartbeating every")
        agent.signal(__import__("signal").SIGUSR1)
        agent.wait_for("node is DRAINING")
        # Another node's token is refused.
        other = Agent(self, "127.0.0.1:%d" % d.port, h, "--node_id", "someone-else",
                      "--token", token)
        other.wait_for("PERMISSION_DENIED")
        with Client("127.0.0.1:%d" % d.port, token=token) as client:  # reads: any token
            self.assertEqual(client.node(h.name).state, "DRAINING")


if __name__ == "__main__":
    unittest.main()
