"""Finds the generated gRPC stubs (never committed).

Where, first found:
  1. $SLICED_PY, if set;
  2. sliced_client/_gen inside this package: an installed package (pip builds
     the stubs into it, see client/python/setup.py);
  3. <repo>/build/python: a source checkout after the CMake build, used with
     PYTHONPATH=client/python (client/python/sliced_client -> <repo>).
The directory holds sliced/v1/sliced_pb2{,_grpc}.py.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_STUB = os.path.join("sliced", "v1", "sliced_pb2.py")


def stub_dir():
    env = os.environ.get("SLICED_PY")
    if env:
        return env
    packaged = os.path.join(_HERE, "_gen")
    if os.path.exists(os.path.join(packaged, _STUB)):
        return packaged
    repo = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
    return os.path.join(repo, "build", "python")


_DIR = stub_dir()
if _DIR not in sys.path:
    sys.path.insert(0, _DIR)

try:
    from sliced.v1 import sliced_pb2, sliced_pb2_grpc  # noqa: E402,F401
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "sliced_client: the generated stubs (sliced/v1/sliced_pb2.py) are not in %r. "
        "Build the project (cmake -S . -B build && cmake --build build), install the "
        "package (README, \"Python client\"), or set SLICED_PY to the build's python/ "
        "directory. (%s)" % (_DIR, e)) from e
