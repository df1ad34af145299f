"""sliced_client: a thin Python client for sliced in Ray's idiom.

Needs Debian's /usr/bin/python3 with python3-grpcio and the generated stubs
(see sliced_client._stubs: $SLICED_PY, the installed package's own, or
<repo>/build/python after the CMake build).
"""
from sliced_client.client import (  # noqa: F401
    DEFAULT_ADDRESS,
    Bundle,
    Client,
    Explanation,
    Node,
    PlacementGroup,
    PreemptionListener,
    ScalingConfig,
    SlicedError,
    Worker,
)

__all__ = ["Bundle", "Client", "DEFAULT_ADDRESS", "Explanation", "Node", "PlacementGroup",
           "PreemptionListener", "ScalingConfig", "SlicedError", "Worker"]
