"""Builds sliced_client with its gRPC stubs inside (sliced_client/_gen).

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
CMAKE_STUBS = os.path.join(REPO, "build", "python", "sliced")


class BuildPyWithStubs(build_py):
    """build_py, then the stubs into <build_lib>/sliced_client/_gen."""

    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "sliced_client", "_gen")
        os.makedirs(out, exist_ok=True)
        protoc = shutil.which("protoc")
        plugin = shutil.which("grpc_python_plugin")
        if protoc and plugin and os.path.exists(PROTO):
            subprocess.check_call([
                protoc, "--python_out=" + out, "--grpc_out=" + out,
                "--plugin=protoc-gen-grpc=" + plugin, "-I", PROTO_DIR, PROTO])
        elif os.path.isdir(CMAKE_STUBS):
            shutil.copytree(CMAKE_STUBS, os.path.join(out, "sliced"), dirs_exist_ok=True)
        else:
            raise SystemExit(
                "sliced_client: cannot make the gRPC stubs: install protobuf-compiler and "
                "protobuf-compiler-grpc (apt-get), or build the repository first "
                "(cmake -S . -B build && cmake --build build)")


setup(cmdclass={"build_py": BuildPyWithStubs})
