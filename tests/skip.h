// Tagged skips.
#pragma once

#include <gtest/gtest.h>

// The only reasons a test may skip, each a tagged message that tests/test_main.cpp records in
// $LES_SKIP_LOG and scripts/skip_report.sh groups (an untagged skip fails the test command):
//   LES_SKIP_CPU: the CPU lacks a feature (an ISA, F16C) or the build has no kernels for it;
//   LES_SKIP_PLATFORM: the kernel, the system's settings or this build's instrumentation
//     (a sanitizer) make the test meaningless here; it runs in the other builds;
//   LES_SKIP_OPTIONAL: an external tool that the README names as optional is not installed.
#define LES_SKIP_CPU(...) GTEST_SKIP() << "[cpu] " << __VA_ARGS__
#define LES_SKIP_PLATFORM(...) GTEST_SKIP() << "[platform] " << __VA_ARGS__
#define LES_SKIP_OPTIONAL(...) GTEST_SKIP() << "[optional] " << __VA_ARGS__
