// The library-level engine: the same output as the generation loop it wraps, bit-identical
// results when a request reuses the previous one's KV cache (attention and recurrent layers,
// resident and streamed experts, with a repetition penalty that sees the reused prefix), stop
// strings, cancellation, clear errors.
#include <atomic>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "les/chat/chat_template.h"
#include "les/engine/engine.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "model_edit.h"
#include "test_util.h"

namespace les {
namespace {

using les::test::tiny_moe_path;

const char* kPrompt = "In the beginning God created the heaven and the earth. And the earth was";

EngineRequest greedy(int n) {
  EngineRequest r;
  r.n_predict = n;
  r.sampling.temp = 0;
  return r;
}

TEST(Engine, GreedyEqualsTheGenerationLoop) {
  LES_REQUIRE_FILE(tiny_moe_path());
  EngineOptions o;
  o.model_path = tiny_moe_path();
  Engine e(o);
  const std::vector<int32_t> ids = e.tokenize(kPrompt, false);
  std::string streamed;
  const EngineResult r = e.generate(ids, greedy(24), [&](std::string_view t) {
    streamed += t;
    return true;
  });
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.n_generated, 24);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.n_reused, 0);

  auto model = Model::load(tiny_moe_path());
  Tokenizer tok(vocab_from_gguf(model->gguf()));
  Context ctx(*model, ContextParams{.n_ctx = e.n_ctx(), .n_threads = 1});
  GenerateParams gp;
  gp.n_predict = 24;
  gp.sampling.temp = 0;
  std::string direct;
  const GenerateStats st = generate(ctx, tok, ids, gp, [&](int32_t, const std::string& piece) {
    direct += piece;
    return true;
  });
  EXPECT_EQ(r.text, direct);
  EXPECT_EQ(r.stats.final_logits_hash, st.final_logits_hash);
}

// Request 1 then request 2 (which extends request 1's text, or shares only part of it) on one
// engine equal request 2 on a fresh engine, bit for bit.
void expect_reuse_exact(const EngineOptions& o, const std::vector<int32_t>& first, const std::vector<int32_t>& second,
                        const EngineRequest& req, int min_reused) {
  Engine warm(o);
  warm.generate(first, req, nullptr);
  const EngineResult a = warm.generate(second, req, nullptr);
  Engine cold(o);
  const EngineResult b = cold.generate(second, req, nullptr);
  EXPECT_GE(a.n_reused, min_reused);
  EXPECT_EQ(b.n_reused, 0);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.stats.final_logits_hash, b.stats.final_logits_hash);
  EXPECT_EQ(a.n_prompt, static_cast<int>(second.size()));
}

TEST(Engine, PrefixReuseIsBitIdentical) {
  LES_REQUIRE_FILE(tiny_moe_path());
  EngineOptions o;
  o.model_path = tiny_moe_path();
  o.context.n_ctx = 256;
  Engine probe(o);
  const std::vector<int32_t> p1 = probe.tokenize(kPrompt, false);
  std::vector<int32_t> p2 = p1;
  for (int32_t t : probe.tokenize(" void; and darkness was upon the face", false)) p2.push_back(t);
  std::vector<int32_t> p3(p1.begin(), p1.begin() + 6);  // shares only a part, then differs
  for (int32_t t : probe.tokenize(" light", false)) p3.push_back(t);
  EngineRequest req = greedy(12);
  req.sampling.repeat_penalty = 1.5f;  // greedy output then depends on the penalty window
  expect_reuse_exact(o, p1, p2, req, static_cast<int>(p1.size()));
  expect_reuse_exact(o, p1, p3, req, 6);
  expect_reuse_exact(o, p1, p1, req, static_cast<int>(p1.size()) - 1);  // the same prompt again

  EngineOptions s = o;  // streamed experts, a cache of a few slots
  s.mem = 64ull << 20;
  s.streaming.io_mode = storage::IoMode::pread;
  expect_reuse_exact(s, p1, p2, req, static_cast<int>(p1.size()));
  Engine streamed(s), resident(o);
  EXPECT_EQ(streamed.generate(p2, req, nullptr).stats.final_logits_hash,
            resident.generate(p2, req, nullptr).stats.final_logits_hash);
}

TEST(Engine, PrefixReuseWithRecurrentLayers) {
  const std::string dir = les::test::temp_dir();
  synth::SynthSpec spec = synth::shape_spec("qwen35-tiny");
  spec.full_attn_interval = 2;
  spec.seed = 5;
  const std::string path = dir + "/qwen35.gguf";
  synth::write_synth_model(spec, path);
  EngineOptions o;
  o.model_path = path;
  o.context.n_ctx = 128;
  o.context.n_batch = 8;  // several batches: the snapshot sits inside the prompt
  std::vector<int32_t> p1, p2;
  for (int i = 0; i < 30; ++i) p1.push_back((i * 37 + 11) % spec.n_vocab);
  p2 = p1;
  for (int i = 0; i < 9; ++i) p2.push_back((i * 53 + 3) % spec.n_vocab);
  std::vector<int32_t> p3(p1.begin(), p1.begin() + 20);
  p3.push_back(7);
  const EngineRequest req = greedy(6);
  expect_reuse_exact(o, p1, p2, req, static_cast<int>(p1.size()));
  expect_reuse_exact(o, p1, p3, req, 20);
  std::remove(path.c_str());
}

TEST(Engine, StopStringsCancelAndErrors) {
  LES_REQUIRE_FILE(tiny_moe_path());
  EngineOptions o;
  o.model_path = tiny_moe_path();
  o.context.n_ctx = 64;
  Engine e(o);
  const std::vector<int32_t> ids = e.tokenize(kPrompt, false);
  const std::string full = e.generate(ids, greedy(24), nullptr).text;
  ASSERT_GT(full.size(), 12u);
  // A stop string from the middle of the greedy text: the text ends just before it.
  EngineRequest req = greedy(24);
  const std::string stop = full.substr(full.size() / 2, 4);
  req.stop = {stop};
  const EngineResult s = e.generate(ids, req, nullptr);
  EXPECT_EQ(s.finish_reason, "stop");
  EXPECT_EQ(s.text, full.substr(0, full.find(stop)));
  EXPECT_LT(s.n_generated, 24);

  std::atomic<bool> cancel{false};
  req = greedy(24);
  req.cancel = &cancel;
  int pieces = 0;
  const EngineResult c = e.generate(ids, req, [&](std::string_view) {
    if (++pieces == 3) cancel.store(true);
    return true;
  });
  EXPECT_EQ(c.finish_reason, "cancelled");
  EXPECT_EQ(pieces, 3) << "nothing is shown after the cancel";
  EXPECT_EQ(c.tokens.size(), 3u);
  EXPECT_EQ(c.n_generated, 4);  // the fourth was computed, then dropped

  const EngineResult refused = e.generate(ids, greedy(24), [](std::string_view) { return false; });
  EXPECT_EQ(refused.finish_reason, "cancelled");
  EXPECT_EQ(refused.n_generated, 1);

  std::vector<int32_t> too_long(65, ids[0]);
  try {
    e.generate(too_long, greedy(1), nullptr);
    FAIL() << "a prompt past the context must be refused";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("context holds 64"), std::string::npos) << err.what();
  }
  EXPECT_THROW(e.generate(std::vector<int32_t>{}, greedy(1), nullptr), Error);
  // The engine still works after the errors.
  EXPECT_EQ(e.generate(ids, greedy(24), nullptr).text, full);
}

TEST(Engine, ChatTemplateFallsBackToChatMl) {
  LES_REQUIRE_FILE(tiny_moe_path());
  EngineOptions o;
  o.model_path = tiny_moe_path();
  Engine e(o);
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  msgs.push_back({{"role", "user"}, {"content", "Hi"}});
  const std::string r = e.render_chat(msgs, true);
  EXPECT_NE(r.find("Hi"), std::string::npos);
  const std::vector<int32_t> ids = e.tokenize_chat(r);
  EXPECT_FALSE(ids.empty());
}

// A chat template that does not parse does not stop plain prompts; chat rendering names the problem.
TEST(Engine, BrokenChatTemplateOnlyFailsChat) {
  LES_REQUIRE_FILE(tiny_moe_path());
  const std::string dir = les::test::temp_dir();
  const std::string path = dir + "/broken-template.gguf";
  les::test::rewrite_model(tiny_moe_path(), path, [](les::test::KvList& kv) {
    les::test::find_kv(kv, "tokenizer.chat_template")->str = "{% for m in messages %}{{ m.content ";
  });
  EngineOptions o;
  o.model_path = path;
  o.context.n_ctx = 64;
  Engine e(o);
  EXPECT_EQ(e.chat_template(), nullptr);
  EXPECT_EQ(e.generate(e.tokenize(kPrompt, false), greedy(4), nullptr).n_generated, 4);
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  msgs.push_back({{"role", "user"}, {"content", "Hi"}});
  try {
    e.render_chat(msgs, true);
    FAIL() << "rendering with a broken template must throw";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("tokenizer.chat_template"), std::string::npos) << err.what();
  }
  std::remove(path.c_str());
}

// The template les chat / les serve use is the file's tokenizer.chat_template: a GGUF carrying
// GLM-4.5's renders the conversations of tests/data/templates as @huggingface/jinja rendered
// them (expected.json; GLM's template uses neither BOS nor EOS, so the tiny model's tokens do
// not matter), and the rendering tokenizes.
TEST(Engine, ChatTemplateComesFromTheFile) {
  LES_REQUIRE_FILE(tiny_moe_path());
  using json = nlohmann::ordered_json;
  const std::string templates = les::test::source_dir() + "/tests/data/templates";
  const auto read_text = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  const std::string source = read_text(templates + "/glm-4.5.jinja");
  ASSERT_FALSE(source.empty());
  const std::string dir = les::test::temp_dir();
  const std::string path = dir + "/glm-template.gguf";
  les::test::rewrite_model(tiny_moe_path(), path, [&](les::test::KvList& kv) {
    les::test::find_kv(kv, "tokenizer.chat_template")->str = source;
  });
  EngineOptions o;
  o.model_path = path;
  o.context.n_ctx = 2048;
  Engine e(o);
  ASSERT_NE(e.chat_template(), nullptr) << e.chat_template_error();
  EXPECT_EQ(e.chat_template()->source(), source);
  const json doc = json::parse(read_text(templates + "/cases.json"));
  const json expected = json::parse(read_text(templates + "/expected.json")).at("glm-4.5");
  int checked = 0;
  for (const json& c : doc.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    if (name != "multi_turn" && name != "enable_thinking_false" && name != "tool_call_argument_types" &&
        name != "reasoning_content") {
      continue;
    }
    SCOPED_TRACE(name);
    const std::string r = e.render_chat(c.at("messages"), c.at("add_generation_prompt").get<bool>(), c.value("extra", json::object()));
    EXPECT_EQ(r, expected.at(name).get<std::string>());
    EXPECT_EQ(r.rfind("[gMASK]<sop>", 0), 0u);
    EXPECT_FALSE(e.tokenize_chat(r).empty());
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  std::remove(path.c_str());
  std::remove(dir.c_str());
}

}  // namespace
}  // namespace les
