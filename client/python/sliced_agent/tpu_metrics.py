"""TPU metrics per chip, from whichever source the host has.

- The GKE TPU device plugin: Prometheus text at http://$TPU_DEVICE_PLUGIN_ADDR
  /metrics (the KubeRay TPU webhook sets the variable; Ray's dashboard
  reporter reads the same), series duty_cycle, memory_used, memory_total,
  tensorcore_utilization, memory_bandwidth_utilization with the chip in the
  `accelerator_id` label (its trailing number is the chip index). Parsed
  with prometheus_client's text parser, the one Ray's reporter uses.
- libtpu's tpu.monitoring.runtime.RuntimeMetricService over gRPC on
  localhost, one port each in $TPU_RUNTIME_METRICS_PORTS (default 8431), as
  tpu-info reads it: GetRuntimeMetric per metric name, the chip in the
  "device-id" attribute (HBM is per device: a v2/v3 chip's two are
  summed). ListSupportedMetrics says which names exist (the utilization and
  bandwidth names vary by libtpu version).

A metric a source does not give is omitted, never reported as 0. A Sample
maps chip index -> {field of sliced.v1.ChipMetrics: value}; libtpu's error
gauges (health.py) come in Sample.gauges.

Not thread-safe: one source per agent loop.
"""
import dataclasses
import re
import urllib.request
from typing import Dict, Iterable, List, Optional

import grpc
from prometheus_client.parser import text_string_to_metric_families

from sliced_agent._stubs import libtpu_pb2, libtpu_pb2_grpc, sliced_pb2

FIELDS = ("tensorcore_utilization", "duty_cycle", "hbm_used_bytes", "hbm_total_bytes",
          "memory_bandwidth_utilization")
PERCENT = ("tensorcore_utilization", "duty_cycle", "memory_bandwidth_utilization")
DEVICE_PLUGIN_SERIES = {
    "duty_cycle": "duty_cycle", "memory_used": "hbm_used_bytes",
    "memory_total": "hbm_total_bytes", "tensorcore_utilization": "tensorcore_utilization",
    "memory_bandwidth_utilization": "memory_bandwidth_utilization",
}
LIBTPU_KNOWN = {
    "tpu.runtime.hbm.memory.usage.bytes": "hbm_used_bytes",
    "tpu.runtime.hbm.memory.total.bytes": "hbm_total_bytes",
    "tpu.runtime.tensorcore.dutycycle.percent": "duty_cycle",
}
# Names found through ListSupportedMetrics, by pattern.
LIBTPU_PATTERNS = (
    (re.compile(r"tensorcore.*util"), "tensorcore_utilization"),
    (re.compile(r"(hbm|memory).*bandwidth.*util"), "memory_bandwidth_utilization"),
)
ERROR_GAUGES = ("slice.error.detected.gauge", "megascale.error.detected.gauge")
# libtpu counts HBM per device (TensorCore), duty cycle per chip (tpu-info's
# get_chip_usage); v2 and v3 chips are two devices each, later chips one.
PER_DEVICE = ("hbm_used_bytes", "hbm_total_bytes")
DEVICES_PER_CHIP = {"TPU-V2": 2, "TPU-V3": 2}
MAX_CHIPS = 64
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclasses.dataclass
class Sample:
    chips: Dict[int, Dict[str, float]] = dataclasses.field(default_factory=dict)
    gauges: Dict[str, float] = dataclasses.field(default_factory=dict)
    source: str = ""

    def put(self, chip: int, field: str, value: float) -> None:
        if 0 <= chip < MAX_CHIPS:
            self.chips.setdefault(chip, {})[field] = float(value)


class SourceError(Exception):
    pass


def _chip_index(text: str) -> Optional[int]:
    m = re.search(r"(\d+)$", text or "")
    return int(m.group(1)) if m else None


def parse_device_plugin(text: str) -> Sample:
    """Per-chip values from the device plugin's exposition text."""
    sample = Sample(source="device-plugin")
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            field = DEVICE_PLUGIN_SERIES.get(s.name)
            chip = _chip_index(s.labels.get("accelerator_id", ""))
            if field and chip is not None:
                sample.put(chip, field, s.value)
    return sample


class DevicePluginSource:
    def __init__(self, address: str, timeout: float = 3.0):
        self.url = "http://%s/metrics" % address
        self.timeout = timeout

    def poll(self) -> Sample:
        try:
            with _NO_PROXY.open(self.url, timeout=self.timeout) as response:
                return parse_device_plugin(response.read().decode("utf-8", "replace"))
        except (OSError, ValueError) as e:
            raise SourceError("device plugin %s: %s" % (self.url, e)) from None


def _device_id(metric) -> Optional[int]:
    attr = metric.attribute
    values = [attr] if attr.key else []
    values += list(attr.value.kvlist_attr.attributes)
    for a in values:
        if a.key in ("device-id", "device_ordinal", "chip-id"):
            which = a.value.WhichOneof("attr")
            if which == "int_attr":
                return a.value.int_attr
            if which == "string_attr" and a.value.string_attr.isdigit():
                return int(a.value.string_attr)
    return None


def _gauge_value(metric) -> Optional[float]:
    which = metric.gauge.WhichOneof("value")
    if which in ("as_double", "as_int"):
        return float(getattr(metric.gauge, which))
    if which == "as_bool":
        return float(metric.gauge.as_bool)
    return None


class LibtpuSource:
    """libtpu's metric service on 127.0.0.1:<port> for each port."""

    def __init__(self, ports: Iterable[int], timeout: float = 2.0, host: str = "127.0.0.1",
                 devices_per_chip: int = 1):
        self.timeout = timeout
        # HBM of devices d and d+1 (v2, v3) is chip d // 2's: summed.
        self.devices_per_chip = devices_per_chip
        self._stubs = []
        for port in ports:
            channel = grpc.secure_channel("%s:%d" % (host, port),
                                          grpc.local_channel_credentials())
            self._stubs.append((port, channel, libtpu_pb2_grpc.RuntimeMetricServiceStub(channel)))
        self._names: Dict[int, Dict[str, str]] = {}

    def close(self) -> None:
        for _, channel, _ in self._stubs:
            channel.close()

    def _metric_names(self, port, stub) -> Dict[str, str]:
        """libtpu metric name -> ChipMetrics field (or the name, for error gauges)."""
        if port not in self._names:
            names = dict(LIBTPU_KNOWN)
            try:
                listed = stub.ListSupportedMetrics(
                    libtpu_pb2.ListSupportedMetricsRequest(), timeout=self.timeout)
                supported = [m.metric_name for m in listed.supported_metric]
                names = {n: f for n, f in LIBTPU_KNOWN.items() if n in supported}
                for name in supported:
                    for pattern, field in LIBTPU_PATTERNS:
                        if pattern.search(name) and field not in names.values():
                            names[name] = field
                    if name in ERROR_GAUGES:
                        names[name] = name
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
            self._names[port] = names
        return self._names[port]

    def poll(self) -> Sample:
        sample = Sample(source="libtpu")
        failures: List[str] = []
        for port, _, stub in self._stubs:
            try:
                self._poll_port(port, stub, sample)
            except grpc.RpcError as e:
                self._names.pop(port, None)
                failures.append("127.0.0.1:%d %s" % (port, e.code().name))
        if failures and len(failures) == len(self._stubs):
            raise SourceError("libtpu metric service: " + ", ".join(failures))
        return sample

    def _poll_port(self, port, stub, sample: Sample) -> None:
        per_device: Dict[int, Dict[str, float]] = {}
        for name, field in self._metric_names(port, stub).items():
            try:
                response = stub.GetRuntimeMetric(
                    libtpu_pb2.MetricRequest(metric_name=name), timeout=self.timeout)
            except grpc.RpcError as e:
                if e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED):
                    continue  # not on this libtpu: omitted
                raise
            for metric in response.metric.metrics:
                value = _gauge_value(metric)
                if value is None:
                    continue
                if field in ERROR_GAUGES:
                    sample.gauges[field] = max(sample.gauges.get(field, 0.0), value)
                    continue
                chip = _device_id(metric)
                if chip is None:
                    continue
                if field in PER_DEVICE and self.devices_per_chip > 1:
                    totals = per_device.setdefault(chip // self.devices_per_chip, {})
                    totals[field] = totals.get(field, 0.0) + value
                else:
                    sample.put(chip, field, value)
        for chip, values in per_device.items():
            for field, value in values.items():
                sample.put(chip, field, value)


def to_proto(node_id: str, sample: Sample):
    """sliced.v1.NodeTpuMetrics with the fields the sample has. The daemon
    rejects a whole batch for one value out of range, so percentages are
    clamped to 0..100, and HBM used is sent only with a total that holds it."""
    chips = []
    for index in sorted(sample.chips):
        values = dict(sample.chips[index])
        for field in PERCENT:
            if field in values:
                values[field] = min(100.0, max(0.0, values[field]))
        used, total = values.get("hbm_used_bytes"), values.get("hbm_total_bytes")
        if used is not None and (total is None or used > total or used < 0):
            del values["hbm_used_bytes"]
        if total is not None and total < 0:
            del values["hbm_total_bytes"]
        chips.append(sliced_pb2.ChipMetrics(chip_index=index, **values))
    return sliced_pb2.NodeTpuMetrics(node_id=node_id, chips=chips)
