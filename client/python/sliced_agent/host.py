"""What this host is: its TPU (accelerator, topology, slice, worker id, chips,
position in the slice) and its CPU and memory, as Ray detects them.

Sources, first found: environment variables (TPU_ACCELERATOR_TYPE,
TPU_TOPOLOGY, TPU_WORKER_ID, TPU_NAME, TPU_WORKER_HOSTNAMES; set on GKE by the
KubeRay TPU webhook), then the GCE metadata server when there is one
(instance/attributes/accelerator-type, tpu-env, agent-worker-number,
instance-id; see metadata.py), then device files under --root (/dev/accel*,
or vfio PCI devices of Google's vendor id 0x1ae0) for the chip count, and
where there are none (a test host) the count the accelerator type implies.
A bad value raises HostError naming where it came from.

Chip coordinates, for the host's position label, come from SLICED_CHIP_COORDS
("x,y,z;x,y,z;..." one per local chip) when set, else from libtpu's SDK when
it is installed: libtpu.sdk.slice.get_chip_coordinates(), one mapping per
chip with hostname(), chip_index() and coordinates(), the call Ray's
ray.util.tpu makes for sub-slices (ray #66029). Without either: no label. The
label's value is "x-y-z": Kubernetes label values (which the daemon enforces)
allow no commas.

Pure functions over (root, env, metadata); HostFacts is immutable.
"""
import dataclasses
import glob
import os
import re
import socket
from typing import Dict, List, Mapping, Optional, Tuple

from sliced_agent.metadata import Metadata, MetadataError

LABEL_HOST_COORDS = "sliced.io/tpu-host-coords"
GOOGLE_PCI_VENDOR = "0x1ae0"
# The PCI device ids of TPU chips under Google's vendor id (tpu-info's list:
# v2/v3, v4, v5p, v5e, v6e, TPU7x). The vendor alone is not enough: the gVNIC
# network card of the same host has it too (device 0x0042).
TPU_PCI_DEVICES = frozenset({"0x0027", "0x005e", "0x0062", "0x0063", "0x006f", "0x0076"})
# Generation prefix of an accelerator type -> (Ray's accelerator type, cores per chip).
GENERATIONS = {
    "v2": ("TPU-V2", 2), "v3": ("TPU-V3", 2), "v4": ("TPU-V4", 2),
    "v5p": ("TPU-V5P", 2), "v5litepod": ("TPU-V5LITEPOD", 1), "v5e": ("TPU-V5LITEPOD", 1),
    "v6e": ("TPU-V6E", 1), "v7x": ("TPU-V7X", 2),
    # Ironwood as the platform spells it (tpu7x-8: 8 cores, 4 chips), which
    # Ray normalizes to v7x-8.
    "tpu7x": ("TPU-V7X", 2),
}
LITE = ("TPU-V5LITEPOD", "TPU-V6E")
_ACCEL = re.compile(r"^(v\d+[a-z]*|tpu7x)-(\d+)$")
_TOPOLOGY = re.compile(r"^\d+x\d+(x\d+)?$")


class HostError(Exception):
    """A host fact that cannot be used; `source` names where it came from
    (an environment variable or a metadata path)."""

    def __init__(self, source: str, message: str):
        super().__init__("%s: %s" % (source, message))
        self.source = source


@dataclasses.dataclass(frozen=True)
class HostFacts:
    node_id: str
    address: str
    cpu: float
    memory_bytes: float
    accelerator_type: str = ""  # Ray's, e.g. "TPU-V6E"; "" on a CPU host
    pod_type: str = ""          # e.g. "v6e-16"
    topology: str = ""          # e.g. "4x4"; "" when unknown
    slice_name: str = ""
    worker_id: int = 0
    chips: int = 0              # TPU chips on this host
    chip_coords: Tuple[Tuple[int, int, int], ...] = ()
    extra_labels: Tuple[Tuple[str, str], ...] = ()

    @property
    def is_tpu(self) -> bool:
        return bool(self.accelerator_type)

    def host_coords(self) -> Optional[Tuple[int, int, int]]:
        """The host's position in its slice's host grid: its lowest chip
        coordinate divided by the chips-per-host bounds (2x2x1 chips on
        v4/v5p/v7x and multi-host v5e/v6e; a single-host slice is 0,0,0)."""
        if not self.chip_coords:
            return None
        low = tuple(min(c[i] for c in self.chip_coords) for i in range(3))
        bounds = (2, 2, 1)
        if self.accelerator_type in LITE and self.topology:
            dims = [int(d) for d in self.topology.split("x")] + [1]
            if dims[0] * dims[1] * dims[2] <= 8:
                bounds = (dims[0], dims[1], dims[2])
        return tuple(low[i] // bounds[i] for i in range(3))

    def labels(self) -> Dict[str, str]:
        out = dict(self.extra_labels)
        if self.is_tpu:
            out["ray.io/accelerator-type"] = self.accelerator_type
            out["ray.io/tpu-pod-type"] = self.pod_type
            out["ray.io/tpu-worker-id"] = str(self.worker_id)
            if self.slice_name:
                out["ray.io/tpu-slice-name"] = self.slice_name
            if self.topology:
                out["ray.io/tpu-topology"] = self.topology
            coords = self.host_coords()
            if coords is not None:
                out[LABEL_HOST_COORDS] = "%d-%d-%d" % coords
        return out

    def resources(self) -> Dict[str, float]:
        """CPU, memory (bytes) and, on a TPU host, TPU (chips),
        accelerator_type:<type> and TPU-<pod type>-head on worker 0, as Ray's
        TPU accelerator manager sets them."""
        out = {"CPU": float(self.cpu), "memory": float(self.memory_bytes)}
        if self.is_tpu:
            out["TPU"] = float(self.chips)
            out["accelerator_type:" + self.accelerator_type] = 1.0
            if self.worker_id == 0:
                out["TPU-%s-head" % self.pod_type] = 1.0
        return out


@dataclasses.dataclass
class DetectOptions:
    """root: where /dev, /sys and /proc are read ("/" on a real host).
    node_id, address, cpu, memory_bytes: overrides (None = detected).
    labels: extra labels, e.g. the zone."""

    root: str = "/"
    node_id: Optional[str] = None
    address: Optional[str] = None
    cpu: Optional[float] = None
    memory_bytes: Optional[float] = None
    labels: Dict[str, str] = dataclasses.field(default_factory=dict)


class _Facts:
    """Looks a fact up in the environment, then in the metadata server."""

    def __init__(self, env: Mapping[str, str], metadata: Optional[Metadata]):
        self.env = env
        self.metadata = metadata
        self._tpu_env: Optional[Dict[str, str]] = None

    def get(self, env_name: str, attribute: str = "", tpu_env_key: str = ""
            ) -> Tuple[str, str]:
        """(value, source); ("", "") when no source has it."""
        value = self.env.get(env_name, "").strip()
        if value:
            return value, env_name
        if self.metadata is None:
            return "", ""
        if attribute:
            path = "instance/attributes/" + attribute
            try:
                value = (self.metadata.get(path) or "").strip()
            except MetadataError as e:
                raise HostError("metadata " + path, str(e).split(": ", 1)[-1]) from None
            if value:
                return value, "metadata " + path
        if tpu_env_key:
            value = self.tpu_env().get(tpu_env_key, "")
            if value:
                return value, "metadata instance/attributes/tpu-env (%s)" % tpu_env_key
        return "", ""

    def tpu_env(self) -> Dict[str, str]:
        """instance/attributes/tpu-env: lines of KEY: 'value'."""
        if self._tpu_env is None:
            path = "instance/attributes/tpu-env"
            try:
                text = self.metadata.get(path) or ""
            except MetadataError as e:
                raise HostError("metadata " + path, str(e).split(": ", 1)[-1]) from None
            self._tpu_env = parse_tpu_env(text, "metadata " + path)
        return self._tpu_env


def parse_tpu_env(text: str, source: str) -> Dict[str, str]:
    """Parses tpu-env's `KEY: 'value'` lines; HostError on any other line."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.match(r"^([A-Z][A-Z0-9_]*)\s*:\s*(?:'([^']*)'|\"([^\"]*)\"|(\S*))\s*$", line)
        if not m:
            raise HostError(source, "line %d is not KEY: 'value': %r" % (n, line[:80]))
        out[m.group(1)] = next(g for g in m.groups()[1:] if g is not None)
    return out


def parse_accelerator(value: str, source: str) -> Tuple[str, int]:
    """"v6e-16" -> ("TPU-V6E", chips in the slice = 16 / cores per chip)."""
    m = _ACCEL.match(value.lower())
    if not m or m.group(1) not in GENERATIONS or int(m.group(2)) <= 0:
        raise HostError(source, "invalid TPU accelerator type %r: expected <generation>-"
                        "<cores or chips> with a generation of %s, e.g. v6e-16 or v4-8"
                        % (value, ", ".join(sorted(GENERATIONS))))
    ray_type, cores = GENERATIONS[m.group(1)]
    return ray_type, max(1, int(m.group(2)) // cores)


def ray_pod_type(accel: str) -> str:
    """Ray's spelling of an accelerator type: "v5e-8" -> "v5litepod-8",
    "tpu7x-16" -> "v7x-16"."""
    accel = accel.lower()
    for platform, ray in (("v5e-", "v5litepod-"), ("tpu7x-", "v7x-")):
        if accel.startswith(platform):
            return ray + accel[len(platform):]
    return accel


def parse_chip_coords(value: str, source: str) -> Tuple[Tuple[int, int, int], ...]:
    """"0,0,0;1,0,0" -> ((0,0,0), (1,0,0)); two numbers mean z = 0."""
    out = []
    for part in value.split(";"):
        try:
            xyz = [int(v) for v in part.split(",")]
        except ValueError:
            xyz = []
        if len(xyz) not in (2, 3) or min(xyz) < 0:
            raise HostError(source, "invalid chip coordinates %r: expected x,y[,z];..." % part)
        out.append(tuple(xyz + [0] * (3 - len(xyz))))
    return tuple(out)


def libtpu_chip_coords(names: List[str], chips: int) -> Tuple[Tuple[int, int, int], ...]:
    """This host's chip coordinates from libtpu's SDK, or () without libtpu.
    The mappings whose hostname() is one of `names` are this host's; when no
    hostname matches, all of them are, if there are exactly `chips` (a
    per-host answer). Otherwise () rather than a guess. Raises HostError
    when the SDK answers something that is not coordinates."""
    try:
        from libtpu import sdk  # type: ignore[import-not-found]
    except ImportError:
        return ()
    source = "libtpu.sdk.slice.get_chip_coordinates()"
    try:
        mappings = list(sdk.slice.get_chip_coordinates())
        mine = [m for m in mappings if m.hostname() in names]
        if not mine and len(mappings) == chips:
            mine = mappings
        coords = [tuple(int(v) for v in m.coordinates()) for m in mine]
    except Exception as e:  # the SDK's own errors: no TPU attached, ...
        raise HostError(source, "failed: %s" % e) from e
    if any(len(c) not in (2, 3) or min(c) < 0 for c in coords):
        raise HostError(source, "invalid chip coordinates %r" % coords)
    return tuple(tuple(list(c) + [0] * (3 - len(c))) for c in coords)


def count_tpu_devices(root: str) -> int:
    """/dev/accel<N> files, else PCI functions (vfio) of vendor 0x1ae0 whose
    device id is a TPU chip's (TPU_PCI_DEVICES); 0 if none."""
    accel = [p for p in glob.glob(os.path.join(root, "dev", "accel*"))
             if re.search(r"accel\d+$", p)]
    if accel:
        return len(accel)
    n = 0
    for device in glob.glob(os.path.join(root, "sys", "bus", "pci", "devices", "*")):
        try:
            with open(os.path.join(device, "vendor")) as f:
                vendor = f.read().strip().lower()
            with open(os.path.join(device, "device")) as f:
                device_id = f.read().strip().lower()
        except OSError:
            continue
        n += vendor == GOOGLE_PCI_VENDOR and device_id in TPU_PCI_DEVICES
    return n


def memory_bytes(root: str) -> float:
    for path in (os.path.join(root, "proc", "meminfo"), "/proc/meminfo"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("MemTotal:"):
                        return float(line.split()[1]) * 1024
        except OSError:
            continue
    return 0.0


def detect(options: DetectOptions, env: Mapping[str, str],
           metadata: Optional[Metadata]) -> HostFacts:
    """The host's facts (see the module comment). Raises HostError."""
    facts = _Facts(env, metadata)
    hostname = socket.gethostname()
    base = dict(cpu=options.cpu if options.cpu is not None else float(os.cpu_count() or 1),
                memory_bytes=(options.memory_bytes if options.memory_bytes is not None
                              else memory_bytes(options.root)),
                extra_labels=tuple(sorted(options.labels.items())))
    accel, accel_source = facts.get("TPU_ACCELERATOR_TYPE", "accelerator-type",
                                    "ACCELERATOR_TYPE")
    if not accel:
        return HostFacts(node_id=options.node_id or hostname,
                         address=options.address or hostname, **base)
    ray_type, slice_chips = parse_accelerator(accel, accel_source)
    topology, topo_source = facts.get("TPU_TOPOLOGY", "", "TOPOLOGY")
    if topology:
        topology = topology.lower()
        dims = [int(d) for d in topology.split("x")] if _TOPOLOGY.match(topology) else []
        if not dims or _product(dims) != slice_chips:
            raise HostError(topo_source, "topology %r does not fit accelerator type %r "
                            "(%d chips)" % (topology, accel, slice_chips))
    per_host = slice_chips if ray_type in LITE and slice_chips <= 8 else min(4, slice_chips)
    hosts = max(1, slice_chips // per_host)
    worker, worker_source = facts.get("TPU_WORKER_ID", "agent-worker-number", "WORKER_ID")
    if not re.match(r"^\d+$", worker or "0") or int(worker or 0) >= hosts:
        raise HostError(worker_source, "invalid worker id %r: expected 0..%d for %s"
                        % (worker, hosts - 1, accel))
    worker_id = int(worker or 0)
    name, _ = facts.get("TPU_NAME", "instance-id")
    hostnames = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    node_id = options.node_id or ("%s-w%d" % (name, worker_id) if name else hostname)
    address = options.address or (hostnames[worker_id].strip()
                                   if worker_id < len(hostnames) else hostname)
    chips = count_tpu_devices(options.root) or per_host
    coords_env = env.get("SLICED_CHIP_COORDS", "").strip()
    coords = (parse_chip_coords(coords_env, "SLICED_CHIP_COORDS") if coords_env
              else libtpu_chip_coords([hostname, address], chips))
    return HostFacts(node_id=node_id, address=address, accelerator_type=ray_type,
                     pod_type=ray_pod_type(accel), topology=topology,
                     slice_name=name, worker_id=worker_id, chips=chips,
                     chip_coords=coords, **base)


def _product(values: List[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out
