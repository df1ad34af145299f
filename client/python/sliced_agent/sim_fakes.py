"""Fakes of what a TPU host offers the agent, on 127.0.0.1 only: libtpu's
metric service (the real proto), the GKE device plugin's /metrics, and the
GCE metadata server. For tests, scripts/demo.sh and the simulated fleet.

Chip values follow a slow wave per chip so /metrics shows live series;
set_error() raises libtpu's error gauges, omit() stops serving a metric.
Thread-safe: servers answer on their own threads; setters take a lock.
"""
import hashlib
import http.server
import math
import threading
import time
import urllib.parse
from concurrent import futures
from typing import Dict, Optional

import grpc
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from sliced_agent._stubs import libtpu_pb2, libtpu_pb2_grpc
from sliced_agent.tpu_metrics import DEVICES_PER_CHIP

HBM_TOTAL = {"TPU-V4": 32 << 30, "TPU-V5P": 95 << 30, "TPU-V6E": 32 << 30,
             "TPU-V5LITEPOD": 16 << 30, "TPU-V7X": 192 << 30}


class ChipWaves:
    """Plausible, changing values for `chips` chips (seeded by `seed`)."""

    def __init__(self, chips: int, accelerator_type: str, seed: int = 0):
        self.chips = chips
        self.total = HBM_TOTAL.get(accelerator_type, 16 << 30)
        # libtpu counts HBM per device (half a v2/v3 chip's each here).
        self.devices_per_chip = DEVICES_PER_CHIP.get(accelerator_type, 1)
        self.seed = seed
        self.lock = threading.Lock()
        self.errors: Dict[str, float] = {}
        self.omitted = set()

    def values(self, chip: int, now: Optional[float] = None) -> Dict[str, float]:
        t = (time.time() if now is None else now) / 30.0 + self.seed * 0.7 + chip * 0.3
        util = 50 + 45 * math.sin(t)
        out = {"tensorcore_utilization": util, "duty_cycle": min(100.0, util + 5),
               "hbm_used_bytes": float(int(self.total * (0.5 + 0.4 * math.sin(t / 2)))),
               "hbm_total_bytes": float(self.total),
               "memory_bandwidth_utilization": 40 + 30 * math.cos(t)}
        with self.lock:
            return {k: v for k, v in out.items() if k not in self.omitted}

    def set_error(self, name: str, value: float) -> None:
        with self.lock:
            self.errors[name] = value

    def omit(self, field: str) -> None:
        with self.lock:
            self.omitted.add(field)


# libtpu metric name -> ChipWaves field, as a recent libtpu lists them.
LIBTPU_NAMES = {
    "tpu.runtime.hbm.memory.usage.bytes": "hbm_used_bytes",
    "tpu.runtime.hbm.memory.total.bytes": "hbm_total_bytes",
    "tpu.runtime.tensorcore.dutycycle.percent": "duty_cycle",
    "tpu.runtime.tensorcore.utilization.percent": "tensorcore_utilization",
    "tpu.runtime.hbm.bandwidth.utilization.percent": "memory_bandwidth_utilization",
}
ERROR_NAMES = ("slice.error.detected.gauge", "megascale.error.detected.gauge")


class _Libtpu(libtpu_pb2_grpc.RuntimeMetricServiceServicer):
    def __init__(self, waves: ChipWaves):
        self.waves = waves
        self.calls = 0

    def ListSupportedMetrics(self, request, context):
        names = list(LIBTPU_NAMES) + list(ERROR_NAMES)
        return libtpu_pb2.ListSupportedMetricsResponse(
            supported_metric=[libtpu_pb2.SupportedMetric(metric_name=n) for n in names])

    def GetRuntimeMetric(self, request, context):
        self.calls += 1
        name = request.metric_name
        out = libtpu_pb2.TPUMetric(name=name)
        if name in ERROR_NAMES:
            with self.waves.lock:
                value = self.waves.errors.get(name, 0.0)
            out.metrics.add().gauge.as_int = int(value)
            return libtpu_pb2.MetricResponse(metric=out)
        field = LIBTPU_NAMES.get(name)
        if field is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown metric " + name)
        per_device = self.waves.devices_per_chip if field.startswith("hbm_") else 1
        for chip in range(self.waves.chips):
            values = self.waves.values(chip)
            if field not in values:
                continue
            for device in range(per_device):
                m = out.metrics.add()
                m.attribute.key = "device-id"
                m.attribute.value.int_attr = chip * per_device + device
                if field.endswith("_bytes"):
                    m.gauge.as_int = int(values[field]) // per_device
                else:
                    m.gauge.as_double = values[field]
        return libtpu_pb2.MetricResponse(metric=out)


class FakeLibtpu:
    """libtpu's RuntimeMetricService on 127.0.0.1:<port> (local credentials,
    as libtpu serves it)."""

    def __init__(self, waves: ChipWaves):
        self.servicer = _Libtpu(waves)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        libtpu_pb2_grpc.add_RuntimeMetricServiceServicer_to_server(self.servicer, self.server)
        self.port = self.server.add_secure_port(
            "127.0.0.1:0", grpc.local_server_credentials(grpc.LocalConnectionType.LOCAL_TCP))
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0)


class _Http(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code: int, body: bytes, headers=()):
        try:
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent went away (a hanging GET when it stopped)


class _HttpFake:
    def __init__(self, handler):
        self.server = _Http(("127.0.0.1", 0), handler)
        self.server.fake = self
        self.port = self.server.server_address[1]
        self.address = "127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _PluginHandler(_Quiet):
    def do_GET(self):
        if self.path != "/metrics":
            return self.reply(404, b"not found\n")
        self.reply(200, self.server.fake.render(), [("Content-Type", "text/plain")])


class FakeDevicePlugin(_HttpFake):
    """The GKE TPU device plugin's /metrics: per-chip gauges labelled
    accelerator_id, model and tpu_topology, for each (container, chips)."""

    def __init__(self, waves: ChipWaves, model: str, topology: str, node_name: str):
        self.waves, self.model, self.topology, self.node_name = waves, model, topology, node_name
        super().__init__(_PluginHandler)

    def render(self) -> bytes:
        registry = CollectorRegistry()
        names = {"duty_cycle": "duty_cycle", "memory_used": "hbm_used_bytes",
                 "memory_total": "hbm_total_bytes",
                 "tensorcore_utilization": "tensorcore_utilization",
                 "memory_bandwidth_utilization": "memory_bandwidth_utilization"}
        labels = ["accelerator_id", "container", "make", "model", "namespace", "pod",
                  "tpu_topology"]
        gauges = {series: Gauge(series, series, labels, registry=registry) for series in names}
        for chip in range(self.waves.chips):
            values = self.waves.values(chip)
            for series, field in names.items():
                if field in values:
                    gauges[series].labels("%s-%d" % (self.node_name, chip), "worker",
                                          "cloud-tpu", self.model, "default", "ray-worker",
                                          self.topology).set(values[field])
        return generate_latest(registry)


class _MetadataHandler(_Quiet):
    def do_GET(self):
        fake = self.server.fake
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        path = url.path[len("/computeMetadata/v1/"):]
        with fake.lock:
            fake.requests.append(self.path)
        if self.headers.get("Metadata-Flavor") != "Google" or \
                not url.path.startswith("/computeMetadata/v1/"):
            return self.reply(403, b"missing Metadata-Flavor\n")
        if query.get("wait_for_change") == ["true"]:
            wait = min(fake.max_wait, float(query.get("timeout_sec", ["60"])[0]))
            last_etag = query.get("last_etag", [None])[0]
            with fake.changed:
                before = fake.values.get(path)
                # Changed since the ETag the caller saw: at once, as GCE does.
                if last_etag is None or last_etag == _etag(before):
                    fake.changed.wait_for(lambda: fake.values.get(path) != before,
                                          timeout=wait)
        with fake.lock:
            value = fake.values.get(path)
        if value is None:
            return self.reply(404, b"not found\n", [("Metadata-Flavor", "Google")])
        self.reply(200, value.encode(), [("Metadata-Flavor", "Google"),
                                         ("Content-Type", "application/text"),
                                         ("ETag", _etag(value))])


def _etag(value: Optional[str]) -> str:
    return hashlib.sha1((value or "").encode()).hexdigest()[:16]


class FakeMetadata(_HttpFake):
    """The GCE metadata server: GET /computeMetadata/v1/<path> with
    Metadata-Flavor: Google; wait_for_change holds the answer until the
    value changes (at most max_wait s). `requests` records every path asked."""

    def __init__(self, values: Optional[Dict[str, str]] = None, max_wait: float = 2.0):
        self.values = {"instance/maintenance-event": "NONE", "instance/preempted": "FALSE"}
        self.values.update(values or {})
        self.requests = []
        self.max_wait = max_wait
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        super().__init__(_MetadataHandler)

    def set(self, path: str, value: str) -> None:
        with self.changed:
            self.values[path] = value
            self.changed.notify_all()
