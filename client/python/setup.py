"""Builds sliced_client and sliced_agent (the node agent), with the gRPC stubs
inside sliced_client/_gen: the API's, and the agent's libtpu metric service
(sliced_agent/protos/sliced_libtpu).

The stubs are generated from <repo>/proto with Debian's protoc and
grpc_python_plugin (the packages the C++ build needs too); without them, they
are copied from the CMake build (<repo>/build/python). Metadata is in
pyproject.toml.
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROTO_DIR = os.path.join(REPO, "proto")
PROTO = os.path.join(PROTO_DIR, "sliced", "v1", "sliced.proto")
CMAKE_STUBS = os.path.join(REPO, "build", "python")
LIBTPU_DIR = os.path.join(HERE, "sliced_agent", "protos")
LIBTPU_PROTO = os.path.join(LIBTPU_DIR, "sliced_libtpu", "tpu_metric_service.proto")


class BuildPyWithStubs(build_py):
    """build_py, then the stubs into <build_lib>/sliced_client/_gen."""

    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "sliced_client", "_gen")
        os.makedirs(out, exist_ok=True)
        protoc = shutil.which("protoc")
        plugin = shutil.which("grpc_python_plugin")
        if protoc and plugin and os.path.exists(PROTO):
            for include, proto in ((PROTO_DIR, PROTO), (LIBTPU_DIR, LIBTPU_PROTO)):
                subprocess.check_call([
                    protoc, "--python_out=" + out, "--grpc_out=" + out,
                    "--plugin=protoc-gen-grpc=" + plugin, "-I", include, proto])
        elif os.path.isdir(os.path.join(CMAKE_STUBS, "sliced")):
            for package in ("sliced", "sliced_libtpu"):
                shutil.copytree(os.path.join(CMAKE_STUBS, package),
                                os.path.join(out, package), dirs_exist_ok=True)
        else:
            raise SystemExit(
                "sliced_client: cannot make the gRPC stubs: install protobuf-compiler and "
                "protobuf-compiler-grpc (apt-get), or build the repository first "
                "(cmake -S . -B build && cmake --build build)")


setup(cmdclass={"build_py": BuildPyWithStubs})
