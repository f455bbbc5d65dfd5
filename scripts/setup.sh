#!/usr/bin/env bash
# Installs the build dependencies (Debian 12, as root or with sudo) and builds les in ./build.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS="build-essential cmake ninja-build pkg-config libgtest-dev liburing-dev nlohmann-json3-dev libxxhash-dev libcpp-httplib-dev libstb-dev curl tmux"
# Sanitizer builds and libFuzzer (scripts/test-sanitizers.sh, scripts/fuzz.sh): clang, its runtime
# libraries and llvm-symbolizer for readable reports. LES_SETUP_NO_SANITIZERS=1 skips them.
if [ -z "${LES_SETUP_NO_SANITIZERS:-}" ]; then PKGS="$PKGS clang libclang-rt-14-dev llvm"; fi
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# A whole build from scratch compiles the library in batches (CMakeLists.txt, LES_UNITY_BUILD):
# LES_UNITY_BUILD=OFF for a developer's tree where one edited file should recompile alone.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLES_UNITY_BUILD=${LES_UNITY_BUILD:-ON} ${LES_CMAKE_ARGS:-} >/dev/null
ninja -C build -j"$(nproc)"
