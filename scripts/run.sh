#!/usr/bin/env bash
# Set-up command 1: installs dependencies, builds, and runs the daemon on an
# embedded RocksDB in ./data, serving gRPC on 127.0.0.1:50051 and Prometheus
# metrics on 127.0.0.1:9464. Extra arguments go to the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/server/sliced --data_dir=./data "$@"
