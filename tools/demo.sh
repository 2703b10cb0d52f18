#!/usr/bin/env bash
# The main job on its built-in default: installs what is missing, builds, runs `seedstore demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bash tools/setup.sh "$BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target seedstore
exec "$BUILD/tools/seedstore" demo "$@"
