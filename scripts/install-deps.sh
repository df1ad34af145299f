#!/usr/bin/env bash
# Installs sliced's build and test dependencies from Debian's packages.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake \
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
  libabsl-dev librocksdb-dev prometheus-cpp-dev libgtest-dev libbenchmark-dev libssl-dev \
  libcpp-httplib-dev chromium \
  grpc-proto python3 python3-grpcio python3-protobuf python3-venv python3-setuptools python3-wheel \
  python3-prometheus-client \
  prometheus clang libclang-rt-14-dev openssl >/dev/null  # promtool; clang + runtimes for ASan/UBSan/libFuzzer; openssl for TLS tests; cpp-httplib serves /metrics, /ui and /api/v1; chromium runs the web view's test
# The etcd store (-DSLICED_WITH_ETCD=ON, docs/ha.md): etcd's .proto files and
# their imports (C++ stubs are generated at build time), and etcd itself for
# the tests and the runbook.
$SUDO apt-get install -y -qq --no-install-recommends \
  etcd-server etcd-client golang-etcd-server-dev golang-github-gogo-protobuf-dev \
  golang-github-grpc-ecosystem-grpc-gateway-dev >/dev/null
# The Go load client of the benchmarks (bench/goload, a stand-in for ghz,
# which Debian does not package): Go and Debian's Go gRPC, protobuf and
# uuid sources.
$SUDO apt-get install -y -qq --no-install-recommends \
  golang-go golang-google-grpc-dev golang-google-protobuf-dev \
  golang-github-google-uuid-dev >/dev/null
