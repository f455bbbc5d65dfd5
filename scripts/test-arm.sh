#!/usr/bin/env bash
# The aarch64 build, tested under emulation (docs/arm.md): installs Debian's cross toolchain,
# qemu-user-static and the arm64 multiarch libraries (as root or with sudo), cross-builds les and
# the test suites below in build-arm (cmake/aarch64-linux-gnu.cmake), and runs them under
# qemu-user twice: on a CPU model with dotprod and i8mm (QEMU_CPU=max: the neon, dotprod and i8mm
# kernels all run) and on one without (cortex-a53: neon only).
#
# Chosen to fit in CI (emulated code runs 30-70x slower; about 1.5 minutes on this 2-core VM, the
# emulated runs side by side).
# On both CPU models (the kernels and the models they compute):
#   kernels    Isas/QuantSimd.* and the low-bit suites (Iq1*, Iq2*, QuantIq3*, Lowbit*: IQ1/IQ2/IQ3,
#              TQ1_0/TQ2_0, MXFP4/NVFP4) (neon, dotprod, i8mm against scalar: every type, random, adversarial
#              and misaligned blocks, gemm == vec_dot bit for bit, quantizers bit-identical),
#              KernelIsas.*, QuantRefDispatch.* (the dispatch against the aux vector), QuantRefLayout.*,
#              QuantRefAct.*, DequantSimd.*, BatchedProducts.Matmul* (threads and batch shapes)
#   models     CrossArch.* (greedy text of the trained models and of synthetic qwen3moe, qwen35moe and
#              mixtral equals the x86-64 recording at every ISA; synth writes the same bytes),
#              ModelTiny.ReferenceLogitsMatchLlamaCpp (x86's tolerance), ModelTiny.BadInputIsAnError
# On the CPU model with dotprod and i8mm only (code that is the same whatever the ISA):
#   models     Qwen35Moe.* (hybrid DeltaNet stack, chunked delta rule, MTP head, rollback) but the
#              llama.cpp comparisons, Pack.SyntheticLogitsBitIdentical
#   tokenizer  Tokenizer*.* but the two largest vocabulary files
#   streaming  Streaming.BitIdenticalAcrossSchedulesCachesThreadsAndIoModes, ChunkedReads*,
#              ResidentExpertsComputeFirst, BudgetTooSmall*, StorageIo*.*
# Left out (the x86-64 run has them): the live llama.cpp comparisons (node-llama-cpp is x86-64),
# the server and CLI tests, the quality/imatrix/mixed-precision/speculative/cache-policy/synth/bench
# suites, the scalar quantizers' error statistics (QuantRef.*, QuantRefDot.*: portable code whose
# output bytes CrossArch compares), ModelTiny's 32-token greedy runs (CrossArch has them) and
# thread/batch invariance, BatchedProducts' whole-model logits at every ISA (80 s per CPU model),
# and the streaming timing and fault-injection tests (throttle, two-ahead, predictor variants,
# routing oracle, retries: arch-independent logic, minutes under emulation).
# io_uring is not emulated by qemu-user: the streaming tests use pread, naive and fake there.
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
FILES+=";test_quant_iq1;test_quant_iq2;test_quant_iq3;test_quant_lowbit"
# The library without what these suites never link (the server, chat templates, benchmarks, quality
# tools: portable code the x86-64 build compiles with the same -Werror; vision: its image decoder
# needs libstb-dev, which the cross build does not install), and no les
# program: about half the compile time. LES_ARM_FULL=1 builds everything (then try build-arm/les).
EXCLUDE='/les/(server|chat|bench|quality|imatrix|mixed|engine|session|vision)/'
if [ -n "${LES_ARM_FULL:-}" ]; then EXCLUDE=""; fi
cmake -S . -B build-arm -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DLES_BUILD_BENCH=OFF "-DLES_TEST_FILES=$FILES" "-DLES_LIB_EXCLUDE=$EXCLUDE" ${LES_ARM_CMAKE_ARGS:-} >/dev/null
TARGETS=les_tests
if [ -n "${LES_ARM_FULL:-}" ]; then TARGETS="les_tests les_cli"; fi
ninja -C build-arm -j"$(nproc)" $TARGETS
T1=$(date +%s)
echo "test-arm: cross build $((T1 - T0)) s"

BOTH='Isas/QuantSimd.*:KernelIsas.*:QuantRefDispatch.*:QuantRefLayout.*:QuantRefAct.*:DequantSimd.*'
BOTH+=':BatchedProducts.Matmul*:CrossArch.*:ModelTiny.ReferenceLogitsMatchLlamaCpp:ModelTiny.BadInputIsAnError'
# The low-bit types: each ISA's kernels against scalar, gemm == vec_dot, and the scalar reference
# against llama.cpp's recorded results (the quantizers' statistics are portable code: x86-64 runs them).
BOTH+=':Isa/Iq1Simd.*:Iq1SimdArm.*:Iq1Ref.*:Isas/Iq2Simd.*:Iq2LlamaCpp.*:Isas/QuantIq3Simd.*:QuantIq3SimdArm.*'
BOTH+=':QuantIq3.DequantizeMatchesLlamaCpp:QuantIq3.VecDotMatchesLlamaCpp:Isas/LowbitSimd.*:LowbitLlama.DequantizeBitExact'
BOTH+=':LowbitLlama.VecDotAgrees'
MAX_ONLY=':Qwen35Moe.*:Pack.SyntheticLogitsBitIdentical:Tokenizer*.*'
MAX_ONLY+=':Streaming.BitIdenticalAcrossSchedulesCachesThreadsAndIoModes:Streaming.ChunkedReads*'
MAX_ONLY+=':Streaming.ResidentExpertsComputeFirst:Streaming.BudgetTooSmall*:StorageIo*.*'
EXCLUDED='TokenizerVocabFiles.LlamaCppCheckout:TokenizerVocabFiles.LlamaBpe'
# The longest test (60 of the 150 s on the dotprod/i8mm model) runs in a process of its own.
LONG='Streaming.BitIdenticalAcrossSchedulesCachesThreadsAndIoModes'

# The emulated runs use one core each (a test at a time): they run side by side, the dotprod/i8mm
# model's longest test in a process of its own, and print their output in turn.
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
run_emulated() {  # cpu filter tag: runs in the background, its log and exit status in $LOGS/tag.*
  ( t=$(date +%s)
    rc=0
    QEMU_CPU=$1 LES_PROBE_CACHE="$PWD/build-arm/test-device-probes-$3.json" \
      qemu-aarch64-static build-arm/les_tests --gtest_filter="$2" --gtest_brief=1 >"$LOGS/$3.log" 2>&1 || rc=$?
    echo "test-arm: -cpu $1 ($3): $(( $(date +%s) - t )) s, exit $rc" >>"$LOGS/$3.log"
    echo $rc >"$LOGS/$3.rc" ) &
}
for cpu in ${1:-max cortex-a53}; do
  echo "test-arm: les_tests under qemu-aarch64 -cpu $cpu"
  if [ "$cpu" = max ]; then
    run_emulated max "$LONG" max-long
    run_emulated max "$BOTH$MAX_ONLY-$EXCLUDED:$LONG" max-rest
  else
    run_emulated "$cpu" "$BOTH" "$cpu"
  fi
done
wait
status=0
for rc in "$LOGS"/*.rc; do
  cat "${rc%.rc}.log"
  [ "$(cat "$rc")" = 0 ] || status=1
done
echo "test-arm: total $(( $(date +%s) - T0 )) s"
exit $status
