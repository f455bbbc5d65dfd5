// One answer on every architecture and kernel ISA: the trained models and three synthetic
// architectures (qwen3moe, qwen35moe, mixtral) decode greedily to the token ids and text recorded in
// tests/data/cross_arch_greedy.json, at every ISA this CPU runs (x86-64: scalar, avx2, avxvnni,
// avx512; aarch64: scalar, neon, dotprod, i8mm), and `les synth` writes the same file bytes. The
// file was recorded on x86-64; the aarch64 build checks it under qemu (scripts/test-arm.sh).
// LES_CROSS_ARCH_RECORD=1 rewrites the file from this machine (then review the diff).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "les/model/context.h"
#include "les/model/model.h"
#include "les/quant/kernels.h"
#include "les/synth/synth.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/atomic_file.h"
#include "les/util/error.h"
#include "les/util/hash.h"
#include "test_util.h"

namespace les {
namespace {

using nlohmann::json;

constexpr int kGen = 24;

struct Case {
  std::string name;
  std::string path;          // a model file, or empty for a synthetic one written from `spec`
  synth::SynthSpec spec;
  std::vector<int32_t> prompt;
};

std::vector<Case> cases(const std::string& tmp) {
  std::vector<Case> out;
  out.push_back({"trained-q4_k_m", test::tiny_moe_path(), {}, {785, 7290, 315, 279, 3409}});
  out.push_back({"trained-q4_k_m-2", test::tiny_moe_path(), {}, {3036, 4264, 1053, 11}});
  out.push_back({"draft-q8_0", test::tiny_draft_path(), {}, {3036, 4264, 1053, 11}});
  std::vector<int32_t> synth_prompt;
  for (int i = 0; i < 16; ++i) synth_prompt.push_back((i * 37 + 5) % 256);  // inside every tiny vocabulary
  synth::SynthSpec q3 = synth::shape_spec("tiny", Arch::qwen3moe);
  q3.type = "q4_k_m";
  out.push_back({"synth-qwen3moe-q4_k_m", "", q3, synth_prompt});
  synth::SynthSpec q35 = synth::shape_spec("qwen35-tiny");
  q35.type = "q4_k_m";
  out.push_back({"synth-qwen35moe-q4_k_m", "", q35, synth_prompt});
  synth::SynthSpec mx = synth::shape_spec("tiny", Arch::llama);
  mx.n_expert = 8;
  mx.n_expert_used = 2;
  mx.type = "q5_k_m";
  out.push_back({"synth-mixtral-q5_k_m", "", mx, synth_prompt});
  for (Case& c : out) {
    if (c.path.empty()) c.path = tmp + "/" + c.name + ".gguf";
  }
  return out;
}

std::vector<int32_t> greedy(const Model& m, const std::vector<int32_t>& prompt) {
  Context ctx(m, ContextParams{.n_ctx = 64, .n_threads = 2});
  const int nv = m.config().n_vocab;
  std::vector<int32_t> out;
  ctx.eval(prompt, false);
  for (int i = 0; i < kGen; ++i) {
    const float* lg = ctx.last_logits();
    const auto next = static_cast<int32_t>(std::max_element(lg, lg + nv) - lg);
    out.push_back(next);
    ctx.eval(std::span<const int32_t>(&next, 1), false);
  }
  return out;
}

std::string expected_path() { return test::source_dir() + "/tests/data/cross_arch_greedy.json"; }

const char* machine() {
#if defined(__x86_64__)
  return "x86-64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "other";
#endif
}

TEST(CrossArch, GreedyTextAndSynthBytesEqualTheRecordedOnes) {
  const bool record = std::getenv("LES_CROSS_ARCH_RECORD") != nullptr;
  json want;
  if (!record) {
    std::ifstream f(expected_path());
    ASSERT_TRUE(f) << "missing " << expected_path();
    want = json::parse(f);
  }
  const std::string tmp = test::temp_dir();
  json got = {{"recorded_on", machine()}, {"n_gen", kGen}, {"cases", json::object()}};
  const Isa saved = kernels().isa;
  for (const Case& c : cases(tmp)) {
    json entry;
    if (c.spec.n_layer > 0 && c.path.rfind(tmp, 0) == 0) {
      synth::write_synth_model(c.spec, c.path);
      const std::vector<uint8_t> bytes = test::read_bytes(c.path);
      entry["file_hash"] = hex64(hash64(bytes.data(), bytes.size()));
    } else {
      ASSERT_TRUE(test::file_exists(c.path)) << "missing test fixture " << c.path;
    }
    auto m = Model::load(c.path);
    Tokenizer tok(vocab_from_gguf(m->gguf()));
    std::string ran;
    for (int i = 0; i < kNumIsa; ++i) {
      const Isa isa = static_cast<Isa>(i);
      if (!isa_supported(isa) || !kernel_table(isa)) continue;
      ASSERT_TRUE(set_active_isa(isa));
      const std::vector<int32_t> ids = greedy(*m, c.prompt);
      const std::string text = tok.decode(ids);
      ran += std::string(ran.empty() ? "" : ", ") + isa_name(isa);
      if (!entry.contains("tokens")) {
        entry["tokens"] = ids;
        entry["text"] = text;  // written with invalid UTF-8 replaced; compared through text_hash
        entry["text_hash"] = hex64(hash64(text.data(), text.size()));
      } else {
        EXPECT_EQ(json(ids), entry["tokens"]) << c.name << ": " << isa_name(isa) << " differs from the first ISA";
      }
      if (!record) {
        ASSERT_TRUE(want["cases"].contains(c.name)) << c.name << " is not recorded";
        const json& w = want["cases"][c.name];
        EXPECT_EQ(json(ids), w["tokens"]) << c.name << " at " << isa_name(isa) << " on " << machine() << ": got "
                                           << json(ids).dump();
        EXPECT_EQ(hex64(hash64(text.data(), text.size())), w["text_hash"].get<std::string>())
            << c.name << " at " << isa_name(isa) << ": decoded text differs";
      }
    }
    if (!record && entry.contains("file_hash")) {
      EXPECT_EQ(entry["file_hash"], want["cases"][c.name]["file_hash"])
          << c.name << ": les synth wrote other bytes on " << machine();
    }
    std::printf("[ CrossArch ] %s: %s checked at %s\n", c.name.c_str(), entry["text"].dump(-1, ' ', false, json::error_handler_t::replace).c_str(), ran.c_str());
    got["cases"][c.name] = entry;
    if (c.path.rfind(tmp, 0) == 0) std::remove(c.path.c_str());
  }
  set_active_isa(saved);
  if (record) {
    const std::string text = got.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    write_file_atomic(expected_path(), text.data(), text.size());
    std::printf("[ CrossArch ] recorded %s\n", expected_path().c_str());
  }
}

}  // namespace
}  // namespace les
