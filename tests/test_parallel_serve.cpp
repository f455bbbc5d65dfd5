// Batched serving (engine/batch_generator.h): requests generated together through the slot
// contexts equal the same requests generated alone by Engine::generate, token for token, text,
// finish reason and final logits (greedy and seeded sampling, prompts longer than n_batch, stop
// strings, n_predict limits, a callback that stops midway, prefix reuse), on the trained model
// resident and streamed and on a qwen35moe file with recurrent layers. A cancelled request frees
// its slot in the step it is seen; the budget counts one KV cache per slot.
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "les/engine/batch_generator.h"
#include "les/engine/engine.h"
#include "les/engine/memory_choice.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "test_util.h"

namespace les {
namespace parallel_serve_test {

using les::test::tiny_moe_path;

// One request of a test: its prompt, its parameters and, for the callback that stops, after how
// many pieces of text it refuses.
struct Case {
  std::vector<int32_t> prompt;
  EngineRequest req;
  int stop_after_pieces = -1;
};

struct Outcome {
  EngineResult result;
  std::string streamed;  // what the text callback was given
  std::string error;
};

TextCallback collecting(std::string& into, int stop_after) {
  auto pieces = std::make_shared<int>(0);
  return [&into, stop_after, pieces](std::string_view t) {
    into += t;
    return stop_after < 0 || ++*pieces < stop_after;
  };
}

Outcome run_alone(Engine& e, const Case& c) {
  Outcome o;
  o.result = e.generate(c.prompt, c.req, collecting(o.streamed, c.stop_after_pieces));
  return o;
}

// Runs the cases through the generator, starting each as soon as a slot is free (in order); also
// reports whether some step evaluated prompt tokens beside decoding requests.
std::vector<Outcome> run_together(BatchGenerator& g, const std::vector<Case>& cases, bool* joined = nullptr,
                                  int* max_sequences = nullptr) {
  std::vector<Outcome> out(cases.size());
  std::map<uint64_t, size_t> index;
  size_t next = 0;
  while (next < cases.size() || !g.idle()) {
    while (next < cases.size() && g.has_free_slot()) {
      const Case& c = cases[next];
      index[g.start(c.prompt, c.req, collecting(out[next].streamed, c.stop_after_pieces))] = next;
      ++next;
    }
    for (BatchGenerator::Finished& f : g.step()) {
      Outcome& o = out.at(index.at(f.id));
      o.result = std::move(f.result);
      o.error = f.error;
    }
    const BatchStepStats& s = g.last_step();
    if (joined && s.decode_tokens > 0 && s.prompt_tokens > 0) *joined = true;
    if (max_sequences) *max_sequences = std::max(*max_sequences, s.sequences);
  }
  return out;
}

void expect_same(const Outcome& together, const Outcome& alone, size_t i) {
  SCOPED_TRACE("request " + std::to_string(i));
  EXPECT_EQ(together.error, "");
  EXPECT_EQ(together.result.tokens, alone.result.tokens);
  EXPECT_EQ(together.result.text, alone.result.text);
  EXPECT_EQ(together.streamed, alone.streamed);
  EXPECT_EQ(together.result.text, together.streamed);
  EXPECT_EQ(together.result.finish_reason, alone.result.finish_reason);
  EXPECT_EQ(together.result.n_generated, alone.result.n_generated);
  EXPECT_EQ(together.result.n_prompt, alone.result.n_prompt);
  EXPECT_EQ(together.result.stats.stop_reason, alone.result.stats.stop_reason);
  EXPECT_EQ(together.result.stats.final_logits_hash, alone.result.stats.final_logits_hash);
}

EngineRequest greedy(int n) {
  EngineRequest r;
  r.n_predict = n;
  r.sampling.temp = 0;
  return r;
}

// A token list of n tokens that varies with seed (ids below n_vocab - 8: no special tokens).
std::vector<int32_t> varied_tokens(int n, int n_vocab, uint64_t seed) {
  std::vector<int32_t> v;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(n_vocab - 8)));
  }
  return v;
}

// The cases on the trained model: short and long prompts (n_batch is 16), greedy and seeded
// sampling, a stop string taken from the text the request generates, an n_predict of 1, a
// callback that stops after 3 pieces, two prompts sharing a prefix.
std::vector<Case> trained_cases(Engine& alone) {
  const auto tok = [&](const char* s) { return alone.tokenize(s, false); };
  std::vector<Case> cs;
  cs.push_back({tok("In the beginning God created the heaven and the earth."), greedy(20)});
  cs.push_back({tok("And the earth was without form, and void; and darkness was upon the face of the deep. And the "
                    "Spirit of God moved upon the face of the waters. And God said, Let there be light: and there "
                    "was light."),
                greedy(16)});
  EngineRequest sampled;
  sampled.n_predict = 24;
  sampled.sampling.temp = 0.9f;
  sampled.sampling.seed = 1234;
  sampled.sampling.repeat_penalty = 1.3f;
  cs.push_back({tok("Once upon a time"), sampled});
  // A stop string from the middle of what this prompt generates alone.
  Case stop{tok("The king said to the people"), greedy(40)};
  const std::string full = alone.generate(stop.prompt, stop.req, nullptr).text;
  EXPECT_GT(full.size(), 24u) << full;
  stop.req.stop = {full.substr(full.size() / 2, 4)};
  cs.push_back(stop);
  cs.push_back({tok("Then"), greedy(1)});
  cs.push_back({tok("And God saw the light, that it was good: and God divided the light from the darkness."), greedy(30), 3});
  std::vector<int32_t> extended = cs[0].prompt;
  for (int32_t t : tok(" And the evening and the morning were the first day.")) extended.push_back(t);
  cs.push_back({extended, greedy(12)});
  return cs;
}

void expect_all_same(Engine& alone, Engine& together, const std::vector<Case>& cases) {
  std::vector<Outcome> ref;
  for (const Case& c : cases) ref.push_back(run_alone(alone, c));
  BatchGenerator g(together);
  bool joined = false;
  int max_seq = 0;
  const std::vector<Outcome> got = run_together(g, cases, &joined, &max_seq);
  for (size_t i = 0; i < cases.size(); ++i) expect_same(got[i], ref[i], i);
  EXPECT_TRUE(joined) << "no step evaluated a prompt chunk beside decoding requests";
  EXPECT_EQ(max_seq, together.n_parallel());
  EXPECT_TRUE(g.idle());
}

EngineOptions tiny_options(int n_parallel) {
  EngineOptions o;
  o.model_path = tiny_moe_path();
  o.context.n_ctx = 256;
  o.context.n_batch = 16;
  o.n_parallel = n_parallel;
  return o;
}

TEST(ParallelServe, TogetherEqualsAloneOnTheTrainedModel) {
  LES_REQUIRE_FILE(tiny_moe_path());
  Engine alone(tiny_options(1));
  Engine together(tiny_options(3));
  ASSERT_EQ(together.n_parallel(), 3);
  const std::vector<Case> cases = trained_cases(alone);
  // The cases themselves vary: a stop string that ends a request early, a callback that stops,
  // a prompt longer than n_batch.
  const Outcome stop = run_alone(alone, cases[3]);
  EXPECT_EQ(stop.result.finish_reason, "stop");
  EXPECT_LT(stop.result.n_generated, 40);
  EXPECT_EQ(run_alone(alone, cases[5]).result.finish_reason, "cancelled");
  EXPECT_GT(cases[1].prompt.size(), 2u * 16u);
  expect_all_same(alone, together, cases);
}

TEST(ParallelServe, TogetherEqualsAloneWithStreamedExperts) {
  LES_REQUIRE_FILE(tiny_moe_path());
  EngineOptions a = tiny_options(1), t = tiny_options(2);
  for (EngineOptions* o : {&a, &t}) {
    o->mem = 64ull << 20;
    o->streaming.io_mode = storage::IoMode::pread;
  }
  Engine alone(a), together(t);
  ASSERT_TRUE(together.streaming());
  expect_all_same(alone, together, trained_cases(alone));
}

TEST(ParallelServe, TogetherEqualsAloneWithRecurrentLayers) {
  const std::string dir = les::test::temp_dir();
  synth::SynthSpec spec = synth::shape_spec("qwen35-tiny");
  spec.full_attn_interval = 2;
  spec.seed = 7;
  const std::string path = dir + "/qwen35.gguf";
  synth::write_synth_model(spec, path);
  EngineOptions o;
  o.model_path = path;
  o.context.n_ctx = 128;
  o.context.n_batch = 8;
  Engine alone(o);
  o.n_parallel = 3;
  Engine together(o);
  std::vector<Case> cases;
  EngineRequest sampled = greedy(10);
  sampled.sampling.temp = 1.0f;
  sampled.sampling.seed = 99;
  for (int i = 0; i < 5; ++i) {
    cases.push_back({varied_tokens(5 + 9 * i, spec.n_vocab, static_cast<uint64_t>(i + 1)), i == 2 ? sampled : greedy(6 + i)});
  }
  std::vector<int32_t> extended = cases[3].prompt;  // 32 tokens, reused then extended by 5
  for (int32_t t : varied_tokens(5, spec.n_vocab, 50)) extended.push_back(t);
  cases.push_back({extended, greedy(7)});
  expect_all_same(alone, together, cases);
  std::remove(path.c_str());
}

TEST(ParallelServe, ANewRequestTakesTheSlotSharingTheLongestPrefix) {
  LES_REQUIRE_FILE(tiny_moe_path());
  Engine together(tiny_options(3));
  Engine alone(tiny_options(1));
  BatchGenerator g(together);
  const auto tok = [&](const char* s) { return together.tokenize(s, false); };
  const std::vector<Case> first = {{tok("In the beginning God created the heaven"), greedy(4)},
                                   {tok("And the earth was without form, and void"), greedy(4)},
                                   {tok("Let there be light"), greedy(4)}};
  run_together(g, first);
  std::vector<int32_t> p = first[1].prompt;
  for (int32_t t : tok("; and darkness was upon the face of the deep")) p.push_back(t);
  Case second{p, greedy(8)};
  second.req.sampling.repeat_penalty = 1.5f;  // greedy output then depends on the penalty window
  const std::vector<Outcome> got = run_together(g, {second});
  EXPECT_EQ(got[0].result.n_reused, static_cast<int>(first[1].prompt.size()));
  Engine fresh(tiny_options(1));
  const Outcome ref = run_alone(fresh, second);
  EXPECT_EQ(ref.result.n_reused, 0);
  expect_same(got[0], ref, 0);
}

TEST(ParallelServe, ACancelledRequestFreesItsSlotAtOnce) {
  LES_REQUIRE_FILE(tiny_moe_path());
  Engine together(tiny_options(2));
  Engine alone(tiny_options(1));
  BatchGenerator g(together);
  std::atomic<bool> cancel{false};
  EngineRequest r = greedy(-1);
  r.stop_at_eog = false;
  r.cancel = &cancel;
  std::string text_a, text_b;
  const std::vector<int32_t> pa = together.tokenize("In the beginning", false);
  const std::vector<int32_t> pb = together.tokenize("And God said", false);
  const uint64_t a = g.start(pa, r, collecting(text_a, -1));
  const uint64_t b = g.start(pb, greedy(12), collecting(text_b, -1));
  EXPECT_FALSE(g.has_free_slot());
  EXPECT_THROW(g.start(pb, greedy(1), nullptr), Error);
  std::vector<BatchGenerator::Finished> ended;
  for (int i = 0; i < 5; ++i) {
    for (auto& f : g.step()) ended.push_back(std::move(f));
  }
  ASSERT_TRUE(ended.empty());
  cancel.store(true);
  const std::vector<BatchGenerator::Finished> now = g.step();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].id, a);
  EXPECT_EQ(now[0].result.finish_reason, "cancelled");
  EXPECT_EQ(now[0].result.text, text_a);
  EXPECT_EQ(g.n_busy(), 1);
  EXPECT_EQ(g.last_step().sequences, 1);  // only b was evaluated in that step
  // The other request goes on to its end, unchanged by its neighbour's cancellation.
  Outcome ob;
  while (!g.idle()) {
    for (auto& f : g.step()) {
      EXPECT_EQ(f.id, b);
      ob.result = std::move(f.result);
    }
  }
  ob.streamed = text_b;
  expect_same(ob, run_alone(alone, {pb, greedy(12)}), 1);
}

TEST(ParallelServe, BadRequestsAndOptions) {
  LES_REQUIRE_FILE(tiny_moe_path());
  Engine e(tiny_options(2));
  BatchGenerator g(e);
  EXPECT_THROW(g.start({}, greedy(1), nullptr), Error);
  EXPECT_THROW(g.start(std::vector<int32_t>(300, 5), greedy(1), nullptr), Error);
  EXPECT_TRUE(g.idle());
  EXPECT_TRUE(g.step().empty());
  // A token outside the vocabulary fails its request with an error; the server goes on.
  const uint64_t bad = g.start({1, 2, 1 << 30}, greedy(2), nullptr);
  const std::vector<BatchGenerator::Finished> f = g.step();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].id, bad);
  EXPECT_NE(f[0].error.find("out of range"), std::string::npos) << f[0].error;
  EXPECT_TRUE(g.idle());

  EngineOptions o = tiny_options(2);
  o.drafter.kind = "ngram";
  try {
    Engine spec(o);
    ADD_FAILURE() << "--parallel with a drafter was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--parallel"), std::string::npos) << err.what();
  }
  o = tiny_options(0);
  EXPECT_THROW({ Engine zero(o); }, Error);
}

TEST(ParallelServe, TheBudgetCountsOneKvCachePerSlot) {
  LES_REQUIRE_FILE(tiny_moe_path());
  const ModelFootprint fp = footprint_of(gguf::read_file(tiny_moe_path()), tiny_moe_path());
  MemoryRequest mr;
  mr.mem = 256ull << 20;
  mr.n_ctx = 512;
  const MemoryChoice one = choose_memory(fp, mr, MemoryFacts{});
  mr.n_parallel = 4;
  const MemoryChoice four = choose_memory(fp, mr, MemoryFacts{});
  EXPECT_GT(one.kv_bytes, 0u);
  EXPECT_EQ(four.kv_bytes, 4 * one.kv_bytes);
  EXPECT_NE(four.why.find("4 slots"), std::string::npos) << four.why;
  // The automatic context of a tight budget shrinks with more slots.
  mr.n_ctx = 0;
  mr.mem = 64ull << 20;
  mr.n_parallel = 1;
  const int ctx1 = choose_memory(fp, mr, MemoryFacts{}).n_ctx;
  mr.n_parallel = 4;
  EXPECT_LT(choose_memory(fp, mr, MemoryFacts{}).n_ctx, ctx1);

  EngineOptions o = tiny_options(1);
  o.mem = 64ull << 20;
  o.streaming.io_mode = storage::IoMode::pread;
  Engine e1(o);
  o.n_parallel = 3;
  Engine e3(o);
  EXPECT_EQ(e3.budget().kv, 3 * e1.budget().kv);
  EXPECT_LT(e3.budget().cache, e1.budget().cache);
  EXPECT_EQ(e3.budget().total, e1.budget().total);
}

}  // namespace parallel_serve_test
}  // namespace les
