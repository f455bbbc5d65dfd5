#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite. The llama.cpp reference (node-llama-cpp, npm)
# is installed when Node.js >= 20 is available; without it the live llama.cpp comparisons skip
# and the stored llama.cpp references are still checked.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

if command -v node >/dev/null 2>&1 && [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ]; then
  if [ ! -d tools/llamacpp-ref/node_modules/node-llama-cpp ]; then
    echo "test: installing the llama.cpp reference (node-llama-cpp) from npm"
    (cd tools/llamacpp-ref && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --no-audit --no-fund --ignore-scripts >/dev/null) \
      || echo "test: node-llama-cpp could not be installed; live llama.cpp comparisons will skip"
  fi
else
  echo "test: Node.js >= 20 not found; live llama.cpp comparisons will skip"
fi

ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
