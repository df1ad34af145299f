"""End to end: the web view's JSON API (/api/v1 on the HTTP port) on the real
daemon: proto field names, pages, errors, read-only; tokens as on gRPC
(bearer header or cookie); TLS and mutual TLS with the daemon's
certificate; and /metrics as prometheus::Exposer served it."""
import gzip
import json
import os
import ssl
import unittest
import socket
import urllib.error
import urllib.request

import grpc
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from sliced_testlib import REPO, sliced_pb2, sliced_pb2_grpc
from test_security_e2e import TOKENS, PkiAndTokens

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url, headers=None, method="GET", context=None):
    """(status, headers, body bytes) of one request."""
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    handlers = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


class WebApiEndToEnd(PkiAndTokens, unittest.TestCase):
    def start(self, *flags):
        d = super().start(*flags)
        d.http = int(d.banner.split("metrics on port ")[1])
        return d

    def url(self, d, path, scheme="http"):
        return "%s://127.0.0.1:%d%s" % (scheme, d.http, path)

    def api(self, d, path, **kw):
        status, headers, body = get(self.url(d, "/api/v1/" + path), **kw)
        self.assertEqual(headers.get("Content-Type"), "application/json")
        return status, json.loads(body)

    def fleet(self, d, metadata=()):
        with open(os.path.join(REPO, "examples", "fleet.json")) as f:
            request = json_format.Parse(f.read(), sliced_pb2.RegisterNodesRequest())
        with d.channel() as ch:
            sliced_pb2_grpc.InventoryStub(ch).RegisterNodes(request, timeout=10, metadata=metadata)

    def submit(self, d, job, metadata=()):
        with d.channel() as ch:
            return sliced_pb2_grpc.PlacementStub(ch).SubmitScalingConfig(
                sliced_pb2.SubmitScalingConfigRequest(
                    scaling_config=sliced_pb2.ScalingConfig(
                        num_workers=4, use_tpu=True, topology="4x4", accelerator_type="TPU-V6E"),
                    job_id=job), timeout=10, metadata=metadata)

    def test_endpoints_answer_json_with_proto_field_names(self):
        d = self.start()
        self.fleet(d)
        held = self.submit(d, "job-1")
        waiting = self.submit(d, "job-2")
        self.assertEqual(waiting.state, sliced_pb2.PENDING)

        status, groups = self.api(d, "slice_groups")
        self.assertEqual(status, 200)
        self.assertEqual(groups["total_slices"], "2")
        v6e = [g for g in groups["groups"] if g["accelerator_type"] == "TPU-V6E"]
        self.assertEqual(len(v6e), 1)
        self.assertEqual((v6e[0]["topology"], v6e[0]["pod_type"], v6e[0]["hosts_per_slice"],
                          v6e[0]["held_slices"]), ("4x4", "v6e-16", "4", "1"))

        # A page of one, then the next: every slice once, with the total.
        status, page = self.api(d, "slices?page_size=1")
        self.assertEqual((status, page["total"], len(page["slices"])), (200, "2", 1))
        status, rest = self.api(d, "slices?page_size=1&page_token=" + page["next_page_token"])
        self.assertNotIn("next_page_token", rest)
        names = [page["slices"][0]["slice"]["name"], rest["slices"][0]["slice"]["name"]]
        self.assertEqual(names, ["v4-b", "v6e-a"])
        v6e_slice = rest["slices"][0]
        self.assertEqual((v6e_slice["status"], v6e_slice["host_grid"]), ("held", "2x2x1"))
        self.assertEqual([h["node_id"] for h in v6e_slice["hosts"]],
                         ["v6e-a-w%d" % w for w in range(4)])
        for h in v6e_slice["hosts"]:
            self.assertEqual((h["state"], h["placement_group_ids"], h["job_ids"]),
                             ("ALIVE", [held.placement_group_id], ["job-1"]))
        _, free = self.api(d, "slices?status=free&accelerator_type=TPU-V4")
        self.assertEqual([s["slice"]["name"] for s in free["slices"]], ["v4-b"])

        status, queue = self.api(d, "queue")
        self.assertEqual((status, queue["total"]), (200, "1"))
        self.assertNotIn("explain", queue["entries"][0])
        status, queue = self.api(d, "queue?explain=true")
        entry = queue["entries"][0]
        self.assertEqual(entry["placement_group"]["placement_group_id"],
                         waiting.placement_group_id)
        self.assertEqual(entry["placement_group"]["pending_reason"], waiting.pending_reason)
        self.assertEqual(entry["explain"]["outcome"], "UNSCHEDULABLE")
        self.assertNotIn("position", entry)  # 0: proto3 JSON leaves it out

        status, detail = self.api(d, "placement_groups/" + held.placement_group_id)
        self.assertEqual(status, 200)
        self.assertEqual([w["node_id"] for w in detail["placement_group"]["workers"]],
                         ["v6e-a-w%d" % w for w in range(4)])
        self.assertEqual(detail["explain"]["outcome"], "PLACED")

        # A node with telemetry: its series, one sample per report.
        with d.channel() as ch:
            stub = sliced_pb2_grpc.TelemetryStub(ch)
            for duty in (10, 20, 30):
                stub.ReportTpuMetrics(sliced_pb2.ReportTpuMetricsRequest(nodes=[
                    sliced_pb2.NodeTpuMetrics(node_id="v6e-a-w0", chips=[sliced_pb2.ChipMetrics(
                        chip_index=0, duty_cycle=duty, hbm_used_bytes=1e9, hbm_total_bytes=4e9)])]),
                    timeout=10)
            stub.AppendLogs(sliced_pb2.AppendLogsRequest(node_id="v6e-a-w0", lines=[
                sliced_pb2.LogLine(severity=sliced_pb2.ERROR, text="libtpu: HBM OOM")]), timeout=10)
        status, node = self.api(d, "nodes/v6e-a-w0")
        self.assertEqual((status, node["node"]["state"]), (200, "ALIVE"))
        chip = node["chips"][0]
        self.assertEqual([s["duty_cycle"] for s in chip["samples"]], [10, 20, 30])
        self.assertEqual(chip["samples"][-1]["hbm_used_percent"], 25)
        self.assertNotIn("tensorcore_utilization", chip["samples"][-1])  # not reported
        self.assertEqual(chip["latest"]["duty_cycle"], 30)
        self.assertEqual(node["recent_logs"][-1]["text"], "libtpu: HBM OOM")
        status, summary = self.api(d, "summary")
        self.assertEqual(summary["pending_placement_groups"], "1")

        # Log times: any valid Timestamp (past 2262 too, where int64
        # nanoseconds end), and a clear error outside Timestamp's range.
        with d.channel() as ch:
            stub = sliced_pb2_grpc.TelemetryStub(ch)
            year_2300 = Timestamp(seconds=10413792000)
            stub.AppendLogs(sliced_pb2.AppendLogsRequest(node_id="v6e-a-w0", lines=[
                sliced_pb2.LogLine(text="from the future", time=year_2300)]), timeout=10)
            tail = list(stub.TailLogs(sliced_pb2.TailLogsRequest(
                node_id="v6e-a-w0", since=Timestamp(seconds=10413791999)), timeout=10))
            self.assertEqual([l.text for l in tail], ["from the future"])
            self.assertEqual(tail[0].time.seconds, 10413792000)
            with self.assertRaises(grpc.RpcError) as bad:
                stub.AppendLogs(sliced_pb2.AppendLogsRequest(node_id="v6e-a-w0", lines=[
                    sliced_pb2.LogLine(text="x", time=Timestamp(seconds=1, nanos=-1))]),
                    timeout=10)
            self.assertEqual(bad.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("lines[0].time: not a valid timestamp", bad.exception.details())
            with self.assertRaises(grpc.RpcError) as bad:
                list(stub.TailLogs(sliced_pb2.TailLogsRequest(
                    since=Timestamp(seconds=253402300800)), timeout=10))
            self.assertEqual(bad.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("since: not a valid timestamp", bad.exception.details())

        # Without tokens: loopback peers asking for a loopback host only (a
        # page whose name was re-pointed at 127.0.0.1: DNS rebinding).
        for host in ("localhost:%d" % d.http, "127.0.0.1", "127.1.2.3:8", "[::1]:80"):
            self.assertEqual(self.api(d, "summary", headers={"Host": host})[0], 200, host)
        for host in ("evil.example:%d" % d.http, "127.0.0.1.evil.example:%d" % d.http,
                     "127.evil.example", "128.0.0.1"):
            status, err = self.api(d, "summary", headers={"Host": host})
            self.assertEqual((status, err["code"]), (403, "PERMISSION_DENIED"), host)
            self.assertIn("loopback host only", err["message"])

        # Errors say what is wrong, as JSON.
        status, err = self.api(d, "nodes/nope")
        self.assertEqual((status, err["code"]), (404, "NOT_FOUND"))
        status, err = self.api(d, "slices?page_size=9999")
        self.assertEqual((status, err["code"]), (400, "INVALID_ARGUMENT"))
        self.assertIn("page_size", err["message"])
        status, err = self.api(d, "slices?status=lost")
        self.assertEqual(status, 400)
        status, err = self.api(d, "nope")
        self.assertEqual(status, 404)

        # Read-only: nothing but GET.
        for method in ("POST", "PUT", "DELETE", "TRACE"):
            status, _, body = get(self.url(d, "/api/v1/placement_groups/" + held.placement_group_id),
                                  method=method)
            self.assertEqual(status, 405, method)
        # ... refused before any body is read (none is bounded by the
        # library, and a compressed one would be inflated): the answer comes
        # while the body is still being sent, and the connection closes.
        with socket.create_connection(("127.0.0.1", d.http), timeout=10) as raw:
            raw.sendall(b"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Transfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n"
                        b"10000\r\n" + b"x" * 1000)
            answer = b""
            while True:
                got = raw.recv(65536)
                if not got:
                    break
                answer += got
        self.assertTrue(answer.startswith(b"HTTP/1.1 405"), answer[:200])
        # A Range header is ignored: one whole body, never a copy per range.
        plain = get(self.url(d, "/ui/app.js"))[2]
        status, headers, body = get(self.url(d, "/ui/app.js"),
                                    headers={"Range": "bytes=" + ",".join(["-"] * 500)})
        self.assertEqual((status, body), (200, plain))
        self.assertIsNone(headers.get("Content-Range"))
        with d.channel() as ch:
            got = sliced_pb2_grpc.PlacementStub(ch).GetPlacementGroup(
                sliced_pb2.GetPlacementGroupRequest(placement_group_id=held.placement_group_id),
                timeout=10)
        self.assertEqual(got.state, sliced_pb2.CREATED)

        # The page and its files.
        status, headers, body = get(self.url(d, "/ui"))
        self.assertEqual((status, headers["Content-Type"]), (200, "text/html; charset=utf-8"))
        self.assertIn(b"/ui/app.js", body)
        self.assertIn("default-src 'self'", headers["Content-Security-Policy"])
        for asset, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
            status, headers, _ = get(self.url(d, "/ui/" + asset))
            self.assertEqual(status, 200)
            self.assertTrue(headers["Content-Type"].startswith(kind))
        self.assertEqual(get(self.url(d, "/ui/nope.js"))[0], 404)

    def test_metrics_as_the_exposer_served_them(self):
        d = self.start()
        status, headers, body = get(self.url(d, "/metrics"))
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "text/plain; charset=utf-8")
        text = body.decode()
        self.assertTrue(text.startswith(
            "# HELP exposer_transferred_bytes_total Transferred bytes to metrics services\n"
            "# TYPE exposer_transferred_bytes_total counter\n"
            "exposer_transferred_bytes_total 0\n"
            "# HELP exposer_scrapes_total Number of times metrics were scraped\n"), text[:300])
        self.assertIn("\nsliced_nodes{", text)
        status, headers, body = get(self.url(d, "/metrics"), headers={"Accept-Encoding": "gzip"})
        self.assertEqual(headers["Content-Encoding"], "gzip")
        self.assertIn("exposer_scrapes_total 1\n", gzip.decompress(body).decode())
        self.assertEqual(get(self.url(d, "/"))[0], 404)

    def test_tokens_as_on_grpc(self):
        d = self.start("--auth_tokens=" + self.tokens_file)
        admin = [("authorization", "Bearer " + TOKENS["admin"])]
        self.fleet(d, admin)
        status, err = self.api(d, "slice_groups")
        self.assertEqual((status, err["code"]), (401, "UNAUTHENTICATED"))
        status, err = self.api(d, "slice_groups",
                               headers={"Authorization": "Bearer not-a-token-of-ours"})
        self.assertEqual((status, err["code"]), (401, "UNAUTHENTICATED"))
        status, err = self.api(d, "slice_groups", headers={"Authorization": "Basic abc"})
        self.assertEqual(status, 401)
        status, err = self.api(d, "slice_groups", headers={"Cookie": "sliced_token=wrong-token-0123"})
        self.assertEqual(status, 401)
        for role in ("viewer", "admin", "scheduler", "agent"):
            status, groups = self.api(d, "slice_groups",
                                      headers={"Authorization": "Bearer " + TOKENS[role]})
            self.assertEqual((status, groups.get("total_slices")), (200, "2"), (role, groups))
        status, groups = self.api(d, "slice_groups",
                                  headers={"Cookie": "theme=dark; sliced_token=" + TOKENS["viewer"]})
        self.assertEqual(status, 200)
        # Behind a proxy that sends its own Authorization (Basic), the
        # cookie still counts; the scheme's case does not matter.
        status, _ = self.api(d, "slice_groups", headers={
            "Authorization": "Basic dXNlcjpwdw==", "Cookie": "sliced_token=" + TOKENS["viewer"]})
        self.assertEqual(status, 200)
        status, _ = self.api(d, "slice_groups",
                             headers={"Authorization": "bearer " + TOKENS["viewer"]})
        self.assertEqual(status, 200)
        # The page itself and /metrics hold no secrets of the API's: open.
        self.assertEqual(get(self.url(d, "/ui"))[0], 200)
        self.assertEqual(get(self.url(d, "/metrics"))[0], 200)
        # A token does not make the API writable.
        status, _, _ = get(self.url(d, "/api/v1/queue"), method="POST",
                           headers={"Authorization": "Bearer " + TOKENS["admin"]})
        self.assertEqual(status, 405)

    def test_tls_and_mutual_tls(self):
        d = self.start("--tls_cert=" + self.pki["server.pem"], "--tls_key=" + self.pki["server.key"])
        context = ssl.create_default_context(cafile=self.pki["ca.pem"])
        status, _, body = get(self.url(d, "/api/v1/summary", "https"), context=context)
        self.assertEqual(status, 200)
        self.assertIn("nodes_by_state", json.loads(body))
        self.assertEqual(get(self.url(d, "/metrics", "https"), context=context)[0], 200)
        with self.assertRaises(Exception):  # plain HTTP to a TLS port
            get(self.url(d, "/api/v1/summary"))
        d.close()

        d = self.start("--tls_cert=" + self.pki["server.pem"], "--tls_key=" + self.pki["server.key"],
                       "--tls_client_ca=" + self.pki["ca.pem"])
        with self.assertRaises(Exception):  # no client certificate
            get(self.url(d, "/api/v1/summary", "https"), context=context)
        context.load_cert_chain(self.pki["client.pem"], self.pki["client.key"])
        self.assertEqual(get(self.url(d, "/api/v1/summary", "https"), context=context)[0], 200)


if __name__ == "__main__":
    unittest.main()
