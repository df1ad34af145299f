#!/usr/bin/env bash
# Configures and builds sliced into ./build (Release with debug info), with
# the etcd store (docs/ha.md).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLICED_WITH_ETCD=ON >/dev/null
cmake --build build -j"$(nproc)"
# The Python client, installed with its generated stubs into ./.venv (which
# sees Debian's python3-grpcio; nothing comes from PyPI), so that
# `.venv/bin/python -c 'import sliced_client'` needs no PYTHONPATH.
[ -x .venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages .venv
.venv/bin/pip install -q --no-deps --no-build-isolation ./client/python
