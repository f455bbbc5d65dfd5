// Running llama.cpp (node-llama-cpp, tools/llamacpp-ref) from tests. Tests that need it skip when
// it is not installed (Node.js >= 20 and `npm ci` in tools/llamacpp-ref).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace les::test {

inline std::string llamacpp_ref_dir() { return source_dir() + "/tools/llamacpp-ref"; }

inline bool llamacpp_available() {
  static const bool ok = [] {
    if (!file_exists(llamacpp_ref_dir() + "/node_modules/node-llama-cpp/package.json")) return false;
    return std::system("node -e 'process.exit(parseInt(process.versions.node) >= 20 ? 0 : 1)' >/dev/null 2>&1") == 0;
  }();
  return ok;
}

#define LES_REQUIRE_LLAMACPP() \
  do { if (!::les::test::llamacpp_available()) LES_SKIP_OPTIONAL("llama.cpp reference: Node.js >= 20 with node-llama-cpp (npm ci in tools/llamacpp-ref) not installed"); } while (0)

inline std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(ids[i]));
  }
  return s;
}

// Full logits of llama.cpp for each sequence (each from an empty context, one batch), row-major
// [sequence positions...][n_vocab]. Empty on failure (the test should fail then).
inline std::vector<float> llamacpp_logits(const std::string& model, const std::vector<std::vector<int32_t>>& seqs,
                                          const std::string& work_dir) {
  const std::string out = work_dir + "/llamacpp.f32";
  std::string cmd = "node " + llamacpp_ref_dir() + "/logits.mjs --model '" + model + "' --out '" + out + "'";
  for (const auto& s : seqs) cmd += " --tokens " + join_ids(s);
  cmd += " > '" + work_dir + "/llamacpp.log' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "llama.cpp reference failed: %s\n", cmd.c_str());
    return {};
  }
  const auto bytes = read_bytes(out);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// llama.cpp's greedy continuation (argmax, ties to the lowest id) of n tokens after `prompt`,
// evaluated in one batch then one token per step. Empty on failure.
inline std::vector<int32_t> llamacpp_greedy(const std::string& model, const std::vector<int32_t>& prompt, int n,
                                            const std::string& work_dir) {
  const std::string out = work_dir + "/greedy.json";
  const std::string cmd = "node " + llamacpp_ref_dir() + "/greedy.mjs --model '" + model + "' --tokens " +
                          join_ids(prompt) + " -n " + std::to_string(n) + " --json '" + out + "' > '" + work_dir +
                          "/greedy.log' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "llama.cpp reference failed: %s\n", cmd.c_str());
    return {};
  }
  std::ifstream f(out);
  return nlohmann::json::parse(f)["gen_tokens"].get<std::vector<int32_t>>();
}

// llama.cpp's token ids for each text with the vocabulary of `model` (tools/llamacpp-ref/tokenize.mjs:
// add_special = false, parse_special = false). The texts must be valid UTF-8 without NUL. Empty on
// failure.
inline std::vector<std::vector<int32_t>> llamacpp_tokenize(const std::string& model, const std::vector<std::string>& texts,
                                                           const std::string& work_dir) {
  const std::string in = work_dir + "/texts.json";
  const std::string out = work_dir + "/ids.json";
  {
    std::ofstream f(in);
    f << nlohmann::json(texts).dump();
  }
  const std::string cmd = "node " + llamacpp_ref_dir() + "/tokenize.mjs --model '" + model + "' --in '" + in +
                          "' --out '" + out + "' > '" + work_dir + "/tokenize.log' 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "llama.cpp reference failed: %s\n", cmd.c_str());
    return {};
  }
  std::ifstream f(out);
  return nlohmann::json::parse(f).get<std::vector<std::vector<int32_t>>>();
}

}  // namespace les::test
