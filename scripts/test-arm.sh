#!/usr/bin/env bash
# The aarch64 build, tested under emulation (docs/arm.md): installs Debian's cross toolchain,
# qemu-user-static and the arm64 multiarch libraries (as root or with sudo), cross-builds les and
# the test suites below in build-arm (cmake/aarch64-linux-gnu.cmake), and runs them under
# qemu-user twice: on a CPU model with dotprod and i8mm (QEMU_CPU=max: the neon, dotprod and i8mm
# kernels all run) and on one without (cortex-a53: neon only).
#
# Chosen to fit about 10 minutes of emulation on 2 cores (emulated code runs 30-70x slower):
#   kernels    Isas/QuantSimd.* (neon, dotprod, i8mm against scalar), KernelIsas.*, QuantRefDispatch.*,
#              QuantRef.*/QuantRefLayout.*/QuantRefAct.*, DequantSimd.*, BatchedProducts.Matmul*
#              and the bundled q4_k_m model's logits across threads and batches
#   models     CrossArch.* (greedy text of the trained models and of synthetic qwen3moe, qwen35moe and
#              mixtral equals the x86-64 recording; synth writes the same bytes), ModelTiny.* but the
#              32-token greedy runs (CrossArch has them), Qwen35Moe.* (no llama.cpp there),
#              Pack.SyntheticLogitsBitIdentical
#   tokenizer  Tokenizer*.* but the large vocabulary files
#   streaming  Streaming.BitIdenticalAcrossSchedulesCachesThreadsAndIoModes, ChunkedReads*,
#              FaultsAreRetriedOrReported, ResidentExpertsComputeFirst, BudgetTooSmall*,
#              StorageIo*.*
# Left out (x86-64 runs them): the live llama.cpp comparisons (node-llama-cpp is x86-64), the
# server and CLI tests, quality/imatrix/mixed/speculative/cache-policy suites (no kernel or
# architecture dependence beyond what the above covers), the slow streaming timing tests
# (throttle, two-ahead, predictor variants, routing oracle: minutes under emulation), and
# BatchedProducts.TrainedModelLogits* (80 s per CPU model; CrossArch covers the trained model).
# io_uring is not emulated by qemu-user: the streaming tests use pread and the fake backend there.
#   scripts/test-arm.sh [max|cortex-a53|...]   (default: both CPU models)
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PKGS="g++-aarch64-linux-gnu qemu-user-static libxxhash-dev:arm64 liburing-dev:arm64 libgtest-dev:arm64 libcpp-httplib-dev:arm64"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "test-arm: installing$missing"
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

FILES="test_quant_simd;test_quant_ref;test_dequant_simd;test_batched_products;test_cross_arch;test_model_tiny;test_qwen35moe;test_pack;test_tokenizer;test_streaming;test_storage_io"
cmake -S . -B build-arm -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DLES_BUILD_BENCH=OFF "-DLES_TEST_FILES=$FILES" ${LES_ARM_CMAKE_ARGS:-} >/dev/null
ninja -C build-arm -j"$(nproc)" les_tests les_cli
T1=$(date +%s)
echo "test-arm: cross build $((T1 - T0)) s"

FILTER='Isas/QuantSimd.*:KernelIsas.*:QuantRefDispatch.*:QuantRef.*:QuantRefLayout.*:QuantRefAct.*:DequantSimd.*'
FILTER+=':BatchedProducts.Matmul*:BatchedProducts.BundledQ4KM*'
FILTER+=':CrossArch.*:ModelTiny.*:Qwen35Moe.*:Pack.SyntheticLogitsBitIdentical'
FILTER+=':Tokenizer*.*'
FILTER+=':Streaming.BitIdenticalAcrossSchedulesCachesThreadsAndIoModes:Streaming.ChunkedReads*:Streaming.FaultsAreRetriedOrReported'
FILTER+=':Streaming.ResidentExpertsComputeFirst:Streaming.BudgetTooSmall*:StorageIo*.*'
FILTER+='-ModelTiny.GreedyContinuationsMatchLlamaCpp:TokenizerVocabFiles.LlamaCppCheckoutIfPresent:TokenizerVocabFiles.LlamaBpe'

status=0
for cpu in ${1:-max cortex-a53}; do
  t=$(date +%s)
  echo "test-arm: les_tests under qemu-aarch64 -cpu $cpu"
  if ! QEMU_CPU=$cpu LES_PROBE_CACHE="$PWD/build-arm/test-device-probes.json" \
      qemu-aarch64-static build-arm/les_tests --gtest_filter="$FILTER" --gtest_brief=1; then
    status=1
  fi
  echo "test-arm: -cpu $cpu $(( $(date +%s) - t )) s"
done
echo "test-arm: total $(( $(date +%s) - T0 )) s"
exit $status
