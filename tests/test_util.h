// Helpers shared by the test files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "skip.h"

namespace les::test {

// Sanitized builds (gcc's __SANITIZE_* macros, clang's __has_feature).
#if defined(__has_feature)
#define LES_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define LES_TEST_HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || LES_TEST_HAS_FEATURE(thread_sanitizer)
// TSan: every memory access and lock is instrumented, so sleeps and wake-ups run late by more
// than the timing tests' margins.
inline constexpr bool kThreadSanitized = true;
#else
inline constexpr bool kThreadSanitized = false;
#endif
#if defined(__SANITIZE_ADDRESS__) || LES_TEST_HAS_FEATURE(address_sanitizer)
inline constexpr bool kAddressSanitized = true;
#else
inline constexpr bool kAddressSanitized = false;
#endif
// Built with ASan or TSan.
inline constexpr bool kSanitized = kAddressSanitized || kThreadSanitized;

inline bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

inline std::string source_dir() { return LES_SOURCE_DIR; }
// The trained models in models/ (models/README.md) and their data in tests/data/trained
// (tests/data/trained/README.md): the repository's own fixtures, never skipped for.
inline std::string trained_data() { return source_dir() + "/tests/data/trained"; }
inline std::string tiny_moe_path() { return source_dir() + "/models/tiny-moe-q4_k_m.gguf"; }
inline std::string tiny_draft_path() { return source_dir() + "/models/tiny-draft-q8_0.gguf"; }
inline std::string tiny_dspark_path() { return source_dir() + "/models/tiny-moe-dspark-q8_0.gguf"; }
inline std::string tiny_val_text_path() { return trained_data() + "/tiny-moe-val.txt"; }

// The whole file in one read (a byte-wise iterator copy takes most of a minute for a 100 MB model
// in an unoptimised sanitizer build); empty if it cannot be read.
inline std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  if (!f) return {};
  std::vector<uint8_t> out(static_cast<size_t>(f.tellg()));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!f) return {};
  return out;
}

inline std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  std::string base = t ? t : "/tmp";
  std::string tmpl = base + "/les-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* d = mkdtemp(buf.data());
  return d ? std::string(d) : base;
}

// A fixture the repository carries: its absence is a failure, never a skip.
#define LES_REQUIRE_FILE(path) \
  do { if (!::les::test::file_exists(path)) GTEST_FAIL() << "missing test fixture " << (path); } while (0)


}  // namespace les::test

namespace les::test {

// Runs the les program with `args` (a shell-quoted string); returns its exit status and puts
// its stderr in *err.
inline int run_les(const std::string& args, std::string* err = nullptr) {
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = std::string(t ? t : "/tmp") + "/les-stderr-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const int fd = mkstemp(buf.data());
  if (fd >= 0) ::close(fd);
  const std::string errf = buf.data();
  const std::string cmd = std::string(LES_CLI) + " " + args + " >/dev/null 2>'" + errf + "'";
  const int rc = std::system(cmd.c_str());
  if (err) {
    const auto b = read_bytes(errf);
    err->assign(b.begin(), b.end());
  }
  std::remove(errf.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace les::test
