"""Finds the generated gRPC stubs (never committed; built by CMake).

Where: $SLICED_PY if set, else <repo>/build/python next to this package
(client/python/sliced_client -> <repo>). The directory holds
sliced/v1/sliced_pb2{,_grpc}.py, written by `cmake --build build`.
"""
import os
import sys


def stub_dir():
    env = os.environ.get("SLICED_PY")
    if env:
        return env
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(repo, "build", "python")


_DIR = stub_dir()
if _DIR not in sys.path:
    sys.path.insert(0, _DIR)

try:
    from sliced.v1 import sliced_pb2, sliced_pb2_grpc  # noqa: E402,F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "sliced_client: the generated stubs (sliced/v1/sliced_pb2.py) are not in %r. "
        "Build the project (cmake -S . -B build && cmake --build build) or set "
        "SLICED_PY to the build's python/ directory. (%s)" % (_DIR, e)) from e
