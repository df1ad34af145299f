"""End to end: TLS, mutual TLS, bearer tokens and the role x RPC matrix,
and the loopback-only rule, on the real daemon."""
import os
import signal
import subprocess
import tempfile
import unittest

import grpc

from sliced_testlib import SLICED_BIN, Daemon, sliced_pb2, sliced_pb2_grpc, temp_data_dir
from sliced_ext import health_pb2, health_pb2_grpc

P = sliced_pb2
TOKENS = {
    "admin": "admin-token-0123456789",
    "scheduler": "sched-token-0123456789",
    "agent": "agent-token-0123456789",
    "viewer": "viewer-token-0123456789",
}


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1/localhost and a client one."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sliced-test-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + name,
            "-keyout", name + ".key", "-out", name + ".csr")
        run("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", name + ".pem")
    return {n: os.path.join(d, n) for n in
            ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


def read(path):
    with open(path, "rb") as f:
        return f.read()


class PkiAndTokens:
    """A test class base: a PKI and a tokens file (one token per role) for
    the whole class, and daemons started with its flags."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="sliced-pki-")
        cls.pki = make_pki(cls.tmp.name)
        cls.tokens_file = os.path.join(cls.tmp.name, "tokens")
        with open(cls.tokens_file, "w") as f:
            f.write("# token role [node]\n")
            for role, token in TOKENS.items():
                f.write("%s %s%s\n" % (token, role, " n1" if role == "agent" else ""))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def start(self, *flags):
        d = Daemon(temp_data_dir(self), "--heartbeat_timeout=0", *flags).start()
        self.addCleanup(d.close)
        return d


class SecurityEndToEnd(PkiAndTokens, unittest.TestCase):
    def tls_channel(self, d, client_cert=False):
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(self.pki["ca.pem"]),
            private_key=read(self.pki["client.key"]) if client_cert else None,
            certificate_chain=read(self.pki["client.pem"]) if client_cert else None)
        ch = grpc.secure_channel("127.0.0.1:%d" % d.port, creds)
        self.addCleanup(ch.close)
        return ch

    def tls_flags(self):
        return ["--tls_cert=" + self.pki["server.pem"], "--tls_key=" + self.pki["server.key"]]

    def test_role_by_rpc_matrix(self):
        d = self.start(*self.tls_flags(), "--auth_tokens=" + self.tokens_file)
        ch = self.tls_channel(d)
        inv, pl, tel = (sliced_pb2_grpc.InventoryStub(ch), sliced_pb2_grpc.PlacementStub(ch),
                        sliced_pb2_grpc.TelemetryStub(ch))
        md = lambda role: [("authorization", "Bearer " + TOKENS[role])]
        inv.RegisterNodes(P.RegisterNodesRequest(nodes=[
            P.Node(node_id=n, address=n, resources={"CPU": 4, "TPU": 4}) for n in ("n1", "n2")]),
            metadata=md("admin"), timeout=10)
        node = lambda n: P.NodeHeartbeat(node_id=n)
        rpcs = {  # name: (call, roles allowed)
            "RegisterNodes(other node)": (lambda m: inv.RegisterNodes(P.RegisterNodesRequest(
                nodes=[P.Node(node_id="n3", address="n3", resources={"CPU": 1})]), metadata=m,
                timeout=10), {"admin"}),
            "RegisterNodes(own node)": (lambda m: inv.RegisterNodes(P.RegisterNodesRequest(
                nodes=[P.Node(node_id="n1", address="n1", resources={"CPU": 4, "TPU": 4})]),
                metadata=m, timeout=10), {"admin", "agent"}),
            "RegisterNodes(own and other)": (lambda m: inv.RegisterNodes(P.RegisterNodesRequest(
                nodes=[P.Node(node_id="n1", address="n1", resources={"CPU": 4, "TPU": 4}),
                       P.Node(node_id="n3", address="n3", resources={"CPU": 1})]),
                metadata=m, timeout=10), {"admin"}),
            "Heartbeat(own node)": (lambda m: inv.Heartbeat(P.HeartbeatRequest(
                heartbeats=[node("n1")]), metadata=m, timeout=10), {"admin", "agent"}),
            "Heartbeat(other node)": (lambda m: inv.Heartbeat(P.HeartbeatRequest(
                heartbeats=[node("n1"), node("n2")]), metadata=m, timeout=10), {"admin"}),
            "DrainNode(other node)": (lambda m: inv.DrainNode(P.DrainNodeRequest(node_id="n3"),
                                                              metadata=m, timeout=10), {"admin"}),
            "DrainNode(own node)": (lambda m: inv.DrainNode(P.DrainNodeRequest(node_id="n1"),
                                                            metadata=m, timeout=10),
                                    {"admin", "agent"}),
            "UndrainNode": (lambda m: inv.UndrainNode(P.UndrainNodeRequest(node_id="n3"),
                                                      metadata=m, timeout=10), {"admin"}),
            "RemoveNode": (lambda m: inv.RemoveNode(P.RemoveNodeRequest(node_id="zz"), metadata=m,
                                                    timeout=10), {"admin"}),
            "GetNode": (lambda m: inv.GetNode(P.GetNodeRequest(node_id="n1"), metadata=m, timeout=10),
                        set(TOKENS)),
            "ListNodes": (lambda m: inv.ListNodes(P.ListNodesRequest(), metadata=m, timeout=10),
                          set(TOKENS)),
            "ListSlices": (lambda m: inv.ListSlices(P.ListSlicesRequest(), metadata=m, timeout=10),
                           set(TOKENS)),
            "PutComputeClass": (lambda m: inv.PutComputeClass(P.PutComputeClassRequest(
                compute_class=P.ComputeClass(name="c", priorities=[P.ComputeClass.Priority()])),
                metadata=m, timeout=10), {"admin"}),
            "ListComputeClasses": (lambda m: inv.ListComputeClasses(
                P.ListComputeClassesRequest(), metadata=m, timeout=10), set(TOKENS)),
            "DeleteComputeClass": (lambda m: inv.DeleteComputeClass(
                P.DeleteComputeClassRequest(name="none"), metadata=m, timeout=10), {"admin"}),
            "CreatePlacementGroup": (lambda m: pl.CreatePlacementGroup(P.CreatePlacementGroupRequest(
                bundles=[P.Bundle(resources={"CPU": 1})]), metadata=m, timeout=10), {"scheduler"}),
            "SubmitScalingConfig": (lambda m: pl.SubmitScalingConfig(P.SubmitScalingConfigRequest(
                scaling_config=P.ScalingConfig(num_workers=1)), metadata=m, timeout=10),
                {"scheduler"}),
            "GetPlacementGroup": (lambda m: pl.GetPlacementGroup(P.GetPlacementGroupRequest(
                placement_group_id="x"), metadata=m, timeout=10), set(TOKENS)),
            "ListPlacementGroups": (lambda m: pl.ListPlacementGroups(
                P.ListPlacementGroupsRequest(), metadata=m, timeout=10), set(TOKENS)),
            "RemovePlacementGroup": (lambda m: pl.RemovePlacementGroup(
                P.RemovePlacementGroupRequest(placement_group_id="x"), metadata=m, timeout=10),
                {"scheduler"}),
            "WatchPlacementGroups": (lambda m: next(iter(pl.WatchPlacementGroups(
                P.WatchPlacementGroupsRequest(placement_group_id="none"), metadata=m,
                timeout=0.5)), None), set(TOKENS)),
            "ExplainPlacementGroup": (lambda m: pl.ExplainPlacementGroup(
                P.ExplainPlacementGroupRequest(placement_group_id="x"), metadata=m, timeout=10),
                set(TOKENS)),
            "ReportTpuMetrics(own node)": (lambda m: tel.ReportTpuMetrics(P.ReportTpuMetricsRequest(
                nodes=[P.NodeTpuMetrics(node_id="n1")]), metadata=m, timeout=10),
                {"admin", "agent"}),
            "ReportTpuMetrics(other node)": (lambda m: tel.ReportTpuMetrics(
                P.ReportTpuMetricsRequest(nodes=[P.NodeTpuMetrics(node_id="n2")]), metadata=m,
                timeout=10), {"admin"}),
            "AppendLogs(own node)": (lambda m: tel.AppendLogs(P.AppendLogsRequest(
                node_id="n1", lines=[P.LogLine(text="x")]), metadata=m, timeout=10),
                {"admin", "agent"}),
            "AppendLogs(other node)": (lambda m: tel.AppendLogs(P.AppendLogsRequest(
                node_id="n2", lines=[P.LogLine(text="x")]), metadata=m, timeout=10), {"admin"}),
            "GetClusterSummary": (lambda m: tel.GetClusterSummary(P.GetClusterSummaryRequest(),
                                                                  metadata=m, timeout=10),
                                  set(TOKENS)),
            "TailLogs": (lambda m: list(tel.TailLogs(P.TailLogsRequest(node_id="n1"), metadata=m,
                                                     timeout=10)), set(TOKENS)),
        }
        for name, (call, allowed) in rpcs.items():
            for role in TOKENS:
                code = grpc.StatusCode.OK
                try:
                    call(md(role))
                except grpc.RpcError as e:
                    code = e.code()
                if role in allowed:
                    self.assertNotIn(code, (grpc.StatusCode.PERMISSION_DENIED,
                                            grpc.StatusCode.UNAUTHENTICATED), (name, role))
                else:
                    self.assertEqual(code, grpc.StatusCode.PERMISSION_DENIED, (name, role))
            for metadata in ([], [("authorization", "Bearer not-a-real-token-at-all")],
                             [("authorization", TOKENS["admin"])]):
                with self.assertRaises(grpc.RpcError) as err:
                    call(metadata)
                self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED, name)
        # Health and reflection stay open.
        self.assertEqual(health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(), timeout=10).status,
            health_pb2.HealthCheckResponse.SERVING)

    def test_derived_agent_tokens(self):
        # Per-node agent tokens: "<node>.<hex HMAC-SHA256(secret, node)>",
        # minted with the openssl command docs/agent.md gives.
        secret = os.path.join(tempfile.mkdtemp(dir=self.tmp.name), "agent-secret")
        with open(secret, "w") as f:
            f.write("0123456789abcdef0123456789abcdef-sliced\n")

        def mint(node):
            out = subprocess.run(
                ["sh", "-c", 'printf %s "$1" | openssl dgst -sha256 -hmac "$(cat "$2")" -r',
                 "mint", node, secret], check=True, capture_output=True, text=True).stdout
            return "%s.%s" % (node, out.split()[0])

        d = self.start("--auth_tokens=" + self.tokens_file, "--agent_token_secret_file=" + secret)
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            md = lambda token: [("authorization", "Bearer " + token)]
            register = lambda node, token: inv.RegisterNodes(P.RegisterNodesRequest(nodes=[
                P.Node(node_id=node, address=node, resources={"CPU": 8})]),
                metadata=md(token), timeout=10)
            register("host-7", mint("host-7"))
            inv.Heartbeat(P.HeartbeatRequest(heartbeats=[P.NodeHeartbeat(node_id="host-7")]),
                          metadata=md(mint("host-7")), timeout=10)
            inv.DrainNode(P.DrainNodeRequest(node_id="host-7"), metadata=md(mint("host-7")),
                          timeout=10)
            for call, code in (
                    (lambda: register("host-8", mint("host-7")), grpc.StatusCode.PERMISSION_DENIED),
                    (lambda: inv.UndrainNode(P.UndrainNodeRequest(node_id="host-7"),
                                             metadata=md(mint("host-7")), timeout=10),
                     grpc.StatusCode.PERMISSION_DENIED),
                    (lambda: register("host-7", "host-7." + "0" * 64),
                     grpc.StatusCode.UNAUTHENTICATED),
                    (lambda: register("host-7", mint("host-7")[:-1]),
                     grpc.StatusCode.UNAUTHENTICATED),
                    (lambda: register("host-8", "host-8" + mint("host-7")[6:]),
                     grpc.StatusCode.UNAUTHENTICATED)):
                with self.assertRaises(grpc.RpcError) as err:
                    call()
                self.assertEqual(err.exception.code(), code)
            # The token file still works beside the secret.
            inv.UndrainNode(P.UndrainNodeRequest(node_id="host-7"),
                            metadata=md(TOKENS["admin"]), timeout=10)

    def test_agent_secret_rules(self):
        secret = os.path.join(tempfile.mkdtemp(dir=self.tmp.name), "short")
        with open(secret, "w") as f:
            f.write("too-short\n")
        proc = subprocess.run([SLICED_BIN, "--data_dir=" + temp_data_dir(self),
                               "--listen=127.0.0.1:0", "--agent_token_secret_file=" + secret],
                              capture_output=True, text=True, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--agent_token_secret_file", proc.stderr)
        self.assertIn("at least 32 bytes", proc.stderr)

    def test_tokens_reload_on_sighup(self):
        tokens = os.path.join(tempfile.mkdtemp(dir=self.tmp.name), "tokens")
        with open(tokens, "w") as f:
            f.write("old-viewer-token-0123 viewer\n")
        d = self.start("--auth_tokens=" + tokens)
        with d.channel() as ch:
            inv = sliced_pb2_grpc.InventoryStub(ch)
            list_nodes = lambda token: inv.ListNodes(P.ListNodesRequest(), timeout=10,
                                                     metadata=[("authorization", "Bearer " + token)])
            list_nodes("old-viewer-token-0123")
            with open(tokens, "w") as f:
                f.write("new-viewer-token-0123 viewer\n")
            d.proc.send_signal(signal.SIGHUP)
            self.assertIn("auth tokens reloaded", d.wait_for_output("SIGHUP"))
            list_nodes("new-viewer-token-0123")
            with self.assertRaises(grpc.RpcError) as err:
                list_nodes("old-viewer-token-0123")
            self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            with open(tokens, "w") as f:
                f.write("short viewer\n")  # invalid: the current table stays
            d.proc.send_signal(signal.SIGHUP)
            self.assertNotIn("reloaded", d.wait_for_output("SIGHUP"))
            list_nodes("new-viewer-token-0123")

    def test_mutual_tls_requires_a_client_certificate(self):
        d = self.start(*self.tls_flags(), "--tls_client_ca=" + self.pki["ca.pem"])
        with self.assertRaises(grpc.RpcError) as err:
            sliced_pb2_grpc.InventoryStub(self.tls_channel(d)).ListNodes(
                P.ListNodesRequest(), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE)
        nodes = sliced_pb2_grpc.InventoryStub(self.tls_channel(d, client_cert=True)).ListNodes(
            P.ListNodesRequest(), timeout=10)
        self.assertEqual(len(nodes.nodes), 0)
        # A plaintext client can't talk to a TLS port.
        with d.channel() as plain, self.assertRaises(grpc.RpcError):
            sliced_pb2_grpc.InventoryStub(plain).ListNodes(P.ListNodesRequest(), timeout=5)

    def test_non_loopback_listen_needs_tls_and_tokens(self):
        from sliced_testlib import SLICED_BIN
        r = subprocess.run([SLICED_BIN, "--listen=0.0.0.0:0", "--metrics_listen=",
                            "--data_dir=" + temp_data_dir(self)],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn('refusing to listen on "0.0.0.0:0" without TLS', r.stderr)

    def test_bad_token_file_is_refused_at_start(self):
        for line, message in (
                ("a-token-that-is-long-enough root", "unknown role 'root'"),
                ("short admin", "token must be at least 16 characters"),
                # The web API's server URL-decodes headers: it would never match there.
                ("a-token-with-%41-in-it admin", "token may not contain '%'")):
            bad = os.path.join(tempfile.mkdtemp(dir=self.tmp.name), "tokens")
            with open(bad, "w") as f:
                f.write(line + "\n")
            with self.assertRaises(RuntimeError) as err:
                Daemon(temp_data_dir(self), "--auth_tokens=" + bad).start()
            self.assertIn(":1: " + message, str(err.exception))


if __name__ == "__main__":
    unittest.main()
