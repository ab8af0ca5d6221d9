#!/usr/bin/env bash
# One command: set up a fresh Debian 12 machine, build, and start kiln on the default config.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh
bash scripts/build.sh build
bash scripts/default_models.sh build  # the toy Qwen3.5 of configs/default.yaml
exec build/bin/kiln serve --config configs/default.yaml "$@"
