#!/usr/bin/env bash
# One command: set up a fresh Debian 12 machine, build, and start kiln on the default config.
#   scripts/run.sh [kiln serve flags...]   e.g. --port 9000 (flags override the YAML)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bash scripts/setup.sh
# Only what serving needs (target kiln_serving: kiln, its plugins, the default models' generator);
# scripts/test.sh builds the rest.
if [ ! -x build/bin/kiln ]; then
  echo "run.sh: building kiln and its plugins: about 5 minutes on 2 cores from an empty compiler cache," \
    "under a minute from a warm one" >&2
fi
KILN_TARGETS=kiln_serving bash scripts/build.sh build
bash scripts/default_models.sh build  # the toy Qwen3.5 of configs/default.yaml
exec build/bin/kiln serve --config configs/default.yaml "$@"
