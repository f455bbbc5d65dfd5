// Mixed-precision allocation (src/les/mixed): the knapsack against brute force, tensor groups, in-memory
// weight replacement, size targets, recipes in metadata, llama.cpp's recipe sizes, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "les/convert/quantize_model.h"
#include "les/mixed/allocate.h"
#include "les/mixed/mixed_plan.h"
#include "les/mixed/sensitivity.h"
#include "les/mixed/stream_cost.h"
#include "les/mixed/tensor_groups.h"
#include "les/quality/token_compare.h"
#include "les/model/context.h"
#include "les/synth/synth.h"
#include "les/util/hash.h"
#include "model_edit.h"
#include "test_util.h"

namespace les::test {
namespace {

using mixed::AllocItem;
using mixed::AllocOption;

// Exhaustive optimum (least dkld, cost <= budget); inf when infeasible.
double brute_force(const std::vector<AllocItem>& items, double budget) {
  double best = INFINITY;
  std::vector<size_t> idx(items.size(), 0);
  while (true) {
    double c = 0, d = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      c += items[i].options[idx[i]].cost;
      d += items[i].options[idx[i]].dkld;
    }
    if (c <= budget) best = std::min(best, d);
    size_t i = 0;
    while (i < items.size() && ++idx[i] == items[i].options.size()) idx[i++] = 0;
    if (i == items.size()) break;
  }
  return best;
}

TEST(MixedAllocate, MatchesBruteForceWithinRounding) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  int checked = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<AllocItem> items(2 + trial % 5);
    double min_c = 0, max_c = 0;
    for (auto& it : items) {
      const int n = 2 + static_cast<int>(rng() % 4);
      double lo = INFINITY, hi = 0;
      for (int k = 0; k < n; ++k) {
        it.options.push_back(AllocOption{1 + 100 * u(rng), u(rng)});
        lo = std::min(lo, it.options.back().cost);
        hi = std::max(hi, it.options.back().cost);
      }
      min_c += lo;
      max_c += hi;
    }
    const double budget = min_c + (max_c - min_c) * u(rng);
    const int res = 20000;
    const mixed::AllocResult r = mixed::allocate(items, budget, res);
    EXPECT_LE(r.cost, budget * (1 + 1e-12));
    // Optimal for the budget less the rounding of each item (costs round up to budget/res).
    const double opt_tight = brute_force(items, budget - static_cast<double>(items.size()) * budget / res);
    const double opt = brute_force(items, budget);
    EXPECT_LE(r.dkld, opt_tight + 1e-12) << "trial " << trial;
    EXPECT_GE(r.dkld, opt - 1e-12) << "trial " << trial;
    double d = 0;
    for (size_t i = 0; i < items.size(); ++i) d += items[i].options[static_cast<size_t>(r.choice[i])].dkld;
    EXPECT_NEAR(d, r.dkld, 1e-12);
    ++checked;
  }
  EXPECT_EQ(checked, 200);
}

TEST(MixedAllocate, BudgetBelowTheCheapestIsAnError) {
  std::vector<AllocItem> items(2);
  items[0].options = {{10, 1}, {20, 0}};
  items[1].options = {{5, 1}, {7, 0}};
  const std::string e = error_of([&] { mixed::allocate(items, 14.0); });
  EXPECT_NE(e.find("below the smallest possible allocation"), std::string::npos) << e;
  EXPECT_NE(e.find("15"), std::string::npos) << e;
}

TEST(MixedGroups, EveryMatrixOfTheTrainedModelIsInExactlyOneGroup) {
  LES_REQUIRE_FILE(tiny_moe_path());
  const gguf::File f = gguf::read_file(tiny_moe_path());
  const auto groups = mixed::tensor_groups(f);
  std::map<std::string, int> seen;
  int expert_groups = 0;
  for (const auto& g : groups) {
    for (const auto& t : g.tensors) ++seen[t.name];
    if (g.routed_experts) ++expert_groups;
    if (g.kind == "ffn_gate_up") {
      EXPECT_EQ(g.tensors.size(), 2u) << g.id();
    }
  }
  EXPECT_EQ(expert_groups, 16);  // gate+up and down of 8 layers
  // 8 layers x (q, k, v, o, router, gate+up, down) + token_embd + output
  EXPECT_EQ(groups.size(), 8u * 7 + 2);
  for (const auto& t : f.tensors) {
    const bool matrix = t.ne.size() >= 2 && t.ne[1] > 1;
    EXPECT_EQ(seen.count(t.name) ? seen[t.name] : 0, matrix ? 1 : 0) << t.name;
  }
}

// A small F16 qwen3moe model whose rows fit the K-quants (256 wide).
std::string k_quant_synth(const ScopedDir& d, const std::string& name) {
  synth::SynthSpec s = synth::shape_spec("tiny");
  s.n_layer = 2;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.n_ff_exp = 256;
  s.n_vocab = 300;
  s.n_ctx = 64;
  s.type = "f16";
  const std::string p = d.file(name);
  synth::write_synth_model(s, p);
  return p;
}

std::vector<int32_t> calib_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

uint64_t logits_hash(const Model& m, const std::vector<int32_t>& toks) {
  ContextParams cp;
  cp.n_ctx = 64;
  Context ctx(m, cp);
  ctx.eval(toks, true);
  uint64_t h = 0;
  for (int i = 0; i < ctx.n_outputs(); ++i) h ^= hash64(ctx.logits(i), sizeof(float) * static_cast<size_t>(m.config().n_vocab)) + i;
  return h;
}

TEST(ModelReplace, ReplacedTensorChangesLogitsAndRestoreIsBitIdentical) {
  ScopedDir d;
  const std::string path = k_quant_synth(d, "m.gguf");
  auto m = Model::load(path);
  const auto toks = calib_tokens(32, m->config().n_vocab, 3);
  const uint64_t h0 = logits_hash(*m, toks);
  const gguf::TensorInfo* t = m->gguf().find_tensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(t, nullptr);
  const int64_t rows = t->n_elements() / t->ne[0];
  std::vector<uint8_t> q(row_bytes(Type::Q2_K, t->ne[0]) * static_cast<size_t>(rows));
  const MappedFile map = MappedFile::open(path);
  ThreadPool pool(1);
  convert_rows(map.data() + m->gguf().data_offset + t->offset, t->type, Type::Q2_K, t->ne, 0, rows, q.data(), t->name,
               {}, pool);
  m->replace_tensor(t->name, Type::Q2_K, q);
  EXPECT_EQ(m->weights().layers[1].down.type, Type::Q2_K);
  EXPECT_NE(logits_hash(*m, toks), h0);
  // The same bytes again (replacing a replacement) give the same logits.
  const uint64_t h1 = logits_hash(*m, toks);
  m->replace_tensor(t->name, Type::Q2_K, q);
  EXPECT_EQ(logits_hash(*m, toks), h1);
  m->restore_tensor(t->name);
  EXPECT_EQ(m->weights().layers[1].down.type, Type::F16);
  EXPECT_EQ(logits_hash(*m, toks), h0);
  // Bad replacements are refused with the tensor named.
  EXPECT_NE(error_of([&] { m->replace_tensor("nope.weight", Type::Q2_K, q); }).find("nope.weight"), std::string::npos);
  EXPECT_NE(error_of([&] { m->replace_tensor(t->name, Type::Q2_K, std::vector<uint8_t>(10)); }).find("bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { m->replace_tensor("blk.0.attn_norm.weight", Type::F32, std::vector<uint8_t>(1024)); })
                .find("not a matrix"),
            std::string::npos);
}

TEST(MixedQuantize, HitsTheSizeTargetAndStoresTheRecipe) {
  ScopedDir d;
  const std::string in = k_quant_synth(d, "in.gguf");
  const gguf::File f = gguf::read_file(in);
  mixed::MixedOptions mo;
  mo.calib_tokens = calib_tokens(128, 300, 5);
  mo.sensitivity.n_ctx = 64;
  mo.sensitivity.n_windows = 2;
  mo.sensitivity.n_threads = 2;
  mo.target_bytes = f.file_size * 45 / 100;
  const mixed::MixedRecipe r = mixed::plan_mixed(in, mo);
  EXPECT_LE(r.predicted_bytes, mo.target_bytes);
  EXPECT_GT(r.measurements, 20);
  QuantizePlan plan = mixed::plan_from_recipe(r, f, 2);
  const std::string out = d.file("out.gguf");
  quantize_model(in, out, plan);
  const gguf::File o = gguf::read_file(out);
  // Within 1% of the target, never above it.
  EXPECT_LE(o.file_size, mo.target_bytes);
  EXPECT_GE(static_cast<double>(o.file_size), 0.99 * static_cast<double>(mo.target_bytes));
  EXPECT_LE(o.file_size, r.predicted_bytes);
  // The recipe round-trips through the metadata, and the file's types are the recipe's.
  const mixed::MixedRecipe back = mixed::recipe_from_gguf(o);
  ASSERT_EQ(back.entries.size(), r.entries.size());
  EXPECT_EQ(back.target_bytes, r.target_bytes);
  EXPECT_DOUBLE_EQ(back.predicted_kld, r.predicted_kld);
  std::set<Type> used;
  for (size_t i = 0; i < r.entries.size(); ++i) {
    EXPECT_EQ(back.entries[i].group, r.entries[i].group);
    EXPECT_EQ(back.entries[i].type, r.entries[i].type);
    EXPECT_EQ(back.entries[i].keep, r.entries[i].keep);
    EXPECT_EQ(back.entries[i].bytes, r.entries[i].bytes);
    used.insert(r.entries[i].type);
  }
  EXPECT_GE(used.size(), 2u) << "a mixed allocation at 45% of F16 uses several types";
  for (const auto& g : mixed::tensor_groups(o)) {
    const auto& e = *std::find_if(back.entries.begin(), back.entries.end(), [&](auto& x) { return x.group == g.id(); });
    for (const auto& t : g.tensors) EXPECT_EQ(t.src_type, e.type) << t.name;
  }
  // The output loads and runs.
  auto m = Model::load(out);
  EXPECT_NE(logits_hash(*m, std::vector<int32_t>(mo.calib_tokens.begin(), mo.calib_tokens.begin() + 64)), 0u);
}

// The hybrid qwen35moe stack (Gated DeltaNet and gated attention layers, shared experts, an MTP
// block): every group's sensitivity is measured by replacing its tensors in the model, so a group
// holding a tensor the model reads as floats (the DeltaNet convolution taps, 4 x channels) failed
// the whole conversion ("not a weight matrix of the model").
TEST(MixedQuantize, HybridQwen35MoeModel) {
  ScopedDir d;
  synth::SynthSpec s = qwen35_k_quant_spec("f16");
  s.n_mtp = 1;
  const std::string in = d.file("in.gguf");
  synth::write_synth_model(s, in);
  const gguf::File f = gguf::read_file(in);
  bool conv_seen = false;
  for (const auto& t : f.tensors) conv_seen |= t.name.find("ssm_conv1d") != std::string::npos;
  ASSERT_TRUE(conv_seen) << "the model has DeltaNet layers";
  for (const auto& g : mixed::tensor_groups(f)) {
    for (const auto& t : g.tensors) {
      EXPECT_EQ(t.name.find("ssm_conv1d"), std::string::npos) << g.id();
      EXPECT_EQ(t.name.find("_norm.weight"), std::string::npos) << g.id();
    }
  }
  mixed::MixedOptions mo;
  mo.calib_tokens = calib_tokens(64, 512, 9);
  mo.sensitivity.n_ctx = 32;
  mo.sensitivity.n_windows = 1;
  mo.sensitivity.n_threads = 2;
  mo.target_bytes = f.file_size * 45 / 100;
  const mixed::MixedRecipe r = mixed::plan_mixed(in, mo);
  EXPECT_LE(r.predicted_bytes, mo.target_bytes);
  const std::string out = d.file("out.gguf");
  quantize_model(in, out, mixed::plan_from_recipe(r, f, 2));
  const gguf::File o = gguf::read_file(out);
  EXPECT_LE(o.file_size, mo.target_bytes);
  for (const auto& t : o.tensors) {
    if (t.name.find("ssm_conv1d") != std::string::npos) {
      EXPECT_EQ(t.type, Type::F32) << t.name;
    }
  }
  auto m = Model::load(out);
  EXPECT_NE(logits_hash(*m, std::vector<int32_t>(mo.calib_tokens.begin(), mo.calib_tokens.begin() + 32)), 0u);
}

TEST(MixedQuantize, BadTargetsAreClearErrorsAndWriteNothing) {
  ScopedDir d;
  const std::string in = k_quant_synth(d, "in.gguf");
  const gguf::File f = gguf::read_file(in);
  mixed::MixedOptions mo;
  mo.calib_tokens = calib_tokens(128, 300, 5);
  mo.sensitivity.n_ctx = 64;
  mo.sensitivity.n_windows = 1;
  mo.target_bytes = f.file_size / 20;  // below Q2_K everywhere
  EXPECT_NE(error_of([&] { mixed::plan_mixed(in, mo); }).find("below the smallest file"), std::string::npos);
  mo.target_bytes = f.file_size + 1;  // the source is already below the target
  EXPECT_NE(error_of([&] { mixed::plan_mixed(in, mo); }).find("already"), std::string::npos);
  mo.target_bytes = f.file_size / 2;
  mo.calib_tokens.resize(10);  // less than one window
  EXPECT_NE(error_of([&] { mixed::plan_mixed(in, mo); }).find("window"), std::string::npos);
  // A packed input is refused.
  EXPECT_FALSE(file_exists(d.file("out.gguf")));
}

// Bytes of a file quantized by `plan` (tensor data, aligned) without writing it.
uint64_t planned_data_bytes(const gguf::File& f, QuantizePlan plan) {
  prepare_plan(plan, f);
  const int n_layer = static_cast<int>(f.get_int(f.get_string("general.architecture", "") + ".block_count", 0));
  uint64_t b = 0;
  for (const auto& t : f.tensors) {
    const Type ty = planned_type(plan, t.name, t.ne, t.type, n_layer);
    b += (row_bytes(ty, t.ne[0]) * static_cast<uint64_t>(t.n_elements() / t.ne[0]) + f.alignment - 1) / f.alignment *
         f.alignment;
  }
  return b;
}

TEST(Recipes, LlamaCppRecipeSizesOnTheTrainedModel) {
  LES_REQUIRE_FILE(tiny_moe_path());
  const gguf::File f = gguf::read_file(tiny_moe_path());
  // llama-quantize's file sizes for this model (the table); the header differs by a few
  // hundred bytes of metadata at most.
  const std::pair<const char*, uint64_t> want[] = {
      {"Q2_K", 24199104}, {"Q3_K_M", 30104640}, {"Q4_K_M", 38108864}, {"Q5_K_M", 43263680}};
  for (const auto& [name, bytes] : want) {
    const uint64_t data = planned_data_bytes(f, parse_quantize_plan(name));
    const uint64_t header = f.data_offset;
    EXPECT_NEAR(static_cast<double>(data + header), static_cast<double>(bytes), 1024.0) << name;
  }
  // Lower-case type names stay pure; upper-case ftype names are recipes.
  EXPECT_EQ(parse_quantize_plan("q2_K").recipe, Recipe::pure);
  EXPECT_EQ(parse_quantize_plan("Q2_K").recipe, Recipe::q2_k);
  EXPECT_EQ(parse_quantize_plan("q3_k_m").recipe, Recipe::q3_k_m);
}

}  // namespace
}  // namespace les::test

namespace les::test {
namespace {

TEST(MixedQuantizeCli, MissingOrBadInputIsAClearErrorAndWritesNothing) {
  ScopedDir d;
  const std::string in = k_quant_synth(d, "in.gguf");
  const std::string out = d.file("out.gguf");
  std::string err;
  EXPECT_EQ(run_les("quantize '" + in + "' '" + out + "' --target-size 1M", &err), 1);
  EXPECT_NE(err.find("calibration text"), std::string::npos) << err;
  EXPECT_EQ(run_les("quantize '" + in + "' '" + out + "' --target-size 1M --calib '" + d.file("none.txt") + "'", &err), 1);
  EXPECT_NE(err.find("none.txt"), std::string::npos) << err;
  EXPECT_EQ(run_les("quantize '" + in + "' '" + out + "' --target-size 1K --calib '" + in + "'", &err), 1);
  EXPECT_NE(err.find("below"), std::string::npos) << err;
  EXPECT_EQ(run_les("quantize '" + in + "' '" + out + "' q4_K --calib '" + in + "'", &err), 1);
  EXPECT_NE(err.find("--calib is for mixed precision"), std::string::npos) << err;
  EXPECT_FALSE(file_exists(out));
}

}  // namespace
}  // namespace les::test

namespace les::test {
namespace {

TEST(ContextFromLayer, EvalFromAnyLayerWithItsInputEqualsTheFullEvalBitForBit) {
  ScopedDir d;
  const std::string path = k_quant_synth(d, "m.gguf");
  auto m = Model::load(path);
  const int L = m->config().n_layer, V = m->config().n_vocab, E = m->config().n_embd;
  const auto toks = calib_tokens(40, V, 11);
  ContextParams cp;
  cp.n_ctx = 64;
  cp.n_batch = 16;  // several chunks
  cp.n_threads = 2;
  Context ctx(*m, cp);
  std::vector<std::vector<float>> in(static_cast<size_t>(L) + 1);
  ctx.set_observer([&](int layer, const char* name, const float* x, int64_t n, int64_t w) {
    if (layer >= 0 && std::string(name) == "l_out") {
      auto& v = in[static_cast<size_t>(layer) + 1];
      v.insert(v.end(), x, x + n * w);
    }
  });
  ctx.eval(toks, true);
  ctx.set_observer({});
  std::vector<float> full(static_cast<size_t>(toks.size()) * V);
  for (size_t i = 0; i < toks.size(); ++i) std::memcpy(&full[i * V], ctx.logits(static_cast<int>(i)), sizeof(float) * V);
  for (int l = 1; l <= L; ++l) {
    ASSERT_EQ(in[static_cast<size_t>(l)].size(), toks.size() * static_cast<size_t>(E));
    ctx.rollback(0);
    ctx.eval_from_layer(toks, l, in[static_cast<size_t>(l)].data());
    for (size_t i = 0; i < toks.size(); ++i) {
      ASSERT_EQ(std::memcmp(&full[i * V], ctx.logits(static_cast<int>(i)), sizeof(float) * V), 0) << "layer " << l;
    }
  }
  // A non-empty context or a layer out of range is refused.
  EXPECT_NE(error_of([&] { ctx.eval_from_layer(toks, 1, in[1].data()); }).find("not empty"), std::string::npos);
  ctx.rollback(0);
  EXPECT_NE(error_of([&] { ctx.eval_from_layer(toks, L + 1, in[1].data()); }).find("outside"), std::string::npos);
}

}  // namespace
}  // namespace les::test

namespace les::test {
namespace {

TEST(MixedSensitivityFile, RoundTripGivesTheSameRecipeAndAnotherModelIsRefused) {
  ScopedDir d;
  const std::string in = k_quant_synth(d, "in.gguf");
  const gguf::File f = gguf::read_file(in);
  mixed::MixedOptions mo;
  mo.calib_tokens = calib_tokens(64, 300, 9);
  mo.sensitivity.n_ctx = 64;
  mo.sensitivity.n_windows = 1;
  mo.target_bytes = f.file_size * 40 / 100;
  mo.sensitivity.candidates = {Type::Q2_K, Type::Q4_K, Type::Q8_0};
  mixed::SensitivityReport rep;
  mo.report_out = &rep;
  const mixed::MixedRecipe r1 = mixed::plan_mixed(in, mo);
  ASSERT_GT(rep.n_measurements, 0);
  const std::string js = mixed::sensitivity_to_json(rep, f, "test");
  const mixed::SensitivityReport back = mixed::sensitivity_from_json(js, f, "s.json");
  mixed::MixedOptions mo2 = mo;
  mo2.measured = &back;
  mo2.report_out = nullptr;
  mo2.calib_tokens.clear();  // not needed when the sensitivity is given
  const mixed::MixedRecipe r2 = mixed::plan_mixed(in, mo2);
  ASSERT_EQ(r1.entries.size(), r2.entries.size());
  for (size_t i = 0; i < r1.entries.size(); ++i) {
    EXPECT_EQ(r1.entries[i].type, r2.entries[i].type) << r1.entries[i].group;
    EXPECT_EQ(r1.entries[i].dkld, r2.entries[i].dkld) << r1.entries[i].group;
  }
  // Another model (other types) is refused, naming the file.
  const std::string other = small_synth_model(d, "other.gguf", "q8_0");
  const std::string e = error_of([&] { mixed::sensitivity_from_json(js, gguf::read_file(other), "s.json"); });
  EXPECT_NE(e.find("s.json was measured on another model"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { mixed::sensitivity_from_json("{\"version\":1}", f, "s.json"); }).find("malformed"),
            std::string::npos);
}

}  // namespace
}  // namespace les::test

namespace les::test {
namespace {

// A measured dKLD equals the mean KL divergence of the whole model with that group alone converted
// (all experts, a full forward pass), although the measurement converts only the experts the
// windows use and starts at the group's layer.
TEST(MixedSensitivity, MeasurementEqualsAFullConversionAndForwardPass) {
  ScopedDir d;
  const std::string in = k_quant_synth(d, "in.gguf");
  auto model = Model::load(in);
  const gguf::File& f = model->gguf();
  std::vector<mixed::TensorGroup> groups;
  for (const auto& g : mixed::tensor_groups(f)) {
    if (g.id() == "blk.1.ffn_down" || g.id() == "blk.1.attn_v") groups.push_back(g);
  }
  ASSERT_EQ(groups.size(), 2u);
  mixed::SensitivityOptions so;
  so.n_ctx = 32;
  so.n_windows = 2;
  so.candidates = {Type::Q3_K};
  so.prune_dominated = false;
  const auto toks = calib_tokens(64, 300, 21);
  const mixed::SensitivityReport rep = mixed::measure_sensitivity(*model, toks, groups, {}, so);
  ASSERT_EQ(rep.groups.size(), 2u);
  for (const auto& gs : rep.groups) {
    ASSERT_EQ(gs.candidates.size(), 2u);  // q3_K and keep
    const auto& c = gs.candidates[0];
    ASSERT_TRUE(c.measured);
    EXPECT_GT(c.dkld, 0.0);
    // By hand: base logits, then every tensor of the group converted whole, a full pass.
    auto base = Model::load(in);
    auto test = Model::load(in);
    const MappedFile map = MappedFile::open(in);
    ThreadPool pool(1);
    for (const auto& t : gs.group.tensors) {
      const gguf::TensorInfo* ti = f.find_tensor(t.name);
      const int64_t rows = ti->n_elements() / ti->ne[0];
      std::vector<uint8_t> q(row_bytes(Type::Q3_K, ti->ne[0]) * static_cast<size_t>(rows));
      convert_rows(map.data() + f.data_offset + ti->offset, ti->type, Type::Q3_K, ti->ne, 0, rows, q.data(), t.name, {},
                   pool);
      test->replace_tensor(t.name, Type::Q3_K, std::move(q));
    }
    double sum = 0;
    int n = 0;
    for (int w = 0; w < 2; ++w) {
      ContextParams cp;
      cp.n_ctx = 32;
      cp.n_batch = 32;
      Context cb(*base, cp), ct(*test, cp);
      const std::span<const int32_t> win(toks.data() + 32 * w, 32);
      cb.eval(win, true);
      ct.eval(win, true);
      for (int j = 0; j + 1 < 32; ++j, ++n) {
        sum += quality::compare_logits(cb.logits(j), ct.logits(j), 300, win[static_cast<size_t>(j) + 1]).kld;
      }
    }
    EXPECT_EQ(c.dkld, sum / n) << gs.group.id();
  }
  // Probe mode measures one type per group and scales the rest by weighted error.
  so.candidates = {Type::Q2_K, Type::Q4_K};
  so.probe_only = true;
  const mixed::SensitivityReport pr = mixed::measure_sensitivity(*model, toks, groups, {}, so);
  EXPECT_EQ(pr.n_measurements, 2);
  for (const auto& gs : pr.groups) {
    ASSERT_EQ(gs.candidates.size(), 3u);
    EXPECT_TRUE(gs.candidates[0].measured);
    EXPECT_FALSE(gs.candidates[1].measured);
    EXPECT_NEAR(gs.candidates[1].dkld / gs.candidates[0].dkld,
                gs.candidates[1].rel_error / gs.candidates[0].rel_error, 1e-12);
  }
  // Probing a subset of the used experts: with all of them it is the full probe (but for the F16
  // rounding of the converted values); with one, the estimate is of the same size.
  so.candidates = {Type::Q2_K};
  so.probe_experts = 1000;
  const mixed::SensitivityReport all = mixed::measure_sensitivity(*model, toks, groups, {}, so);
  so.probe_experts = 1;
  const mixed::SensitivityReport one = mixed::measure_sensitivity(*model, toks, groups, {}, so);
  const double full = pr.groups[0].group.routed_experts ? pr.groups[0].candidates[0].dkld : pr.groups[1].candidates[0].dkld;
  const size_t ie = pr.groups[0].group.routed_experts ? 0 : 1;
  EXPECT_NEAR(all.groups[ie].candidates[0].dkld, full, 0.02 * full);
  EXPECT_GT(one.groups[ie].candidates[0].dkld, 0.2 * full);
  EXPECT_LT(one.groups[ie].candidates[0].dkld, 5.0 * full);
  // Dense groups are not affected by probe_experts.
  EXPECT_EQ(one.groups[1 - ie].candidates[0].dkld, pr.groups[1 - ie].candidates[0].dkld);
}

}  // namespace
}  // namespace les::test

namespace les::test {
namespace {

TEST(MixedStreamCost, MemBudgetPricesExpertBytesByMissRate) {
  ScopedDir d;
  synth::SynthSpec s = synth::shape_spec("tiny");
  s.n_layer = 3;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_expert = 16;
  s.n_expert_used = 2;
  s.n_ff_exp = 256;
  s.n_vocab = 300;
  s.n_ctx = 64;
  s.type = "f16";
  const std::string in = d.file("in.gguf");
  synth::write_synth_model(s, in);
  const gguf::File f = gguf::read_file(in);
  auto model = Model::load(in);
  const auto groups = mixed::tensor_groups(f);
  const auto toks = calib_tokens(128, 300, 4);
  // A budget with room for ~1/3 of the experts at 4 bits per weight.
  const double expert_bytes = 3.0 * 256 * 256 * 4.0 / 8.0;
  const uint64_t small = (16ull << 20) + 5'000'000 + static_cast<uint64_t>(16 * expert_bytes);
  const mixed::StreamPrices p = mixed::stream_prices(*model, groups, toks, 64, 2, 1, small, 4.0);
  ASSERT_EQ(p.miss_rate.size(), 3u);
  for (double m : p.miss_rate) {
    EXPECT_GT(m, 0.0);
    EXPECT_LE(m, 1.0);
  }
  EXPECT_GT(p.dense_price, 0.0) << "a dense byte takes cache and adds misses";
  EXPECT_LT(p.cache_experts, 48u);
  // Everything fits: only cold misses, and dense bytes cost nothing.
  const mixed::StreamPrices big = mixed::stream_prices(*model, groups, toks, 64, 2, 1, 1ull << 30, 4.0);
  EXPECT_EQ(big.cache_experts, 48u);
  EXPECT_EQ(big.dense_price, 0.0);
  for (size_t l = 0; l < 3; ++l) EXPECT_LE(big.miss_rate[l], p.miss_rate[l]);
  // Too small for the dense tensors and a minimal cache.
  EXPECT_NE(error_of([&] { mixed::stream_prices(*model, groups, toks, 64, 2, 1, 1 << 20, 4.0); }).find("cannot hold"),
            std::string::npos);
  // The allocation under --mem: a recipe priced by streaming cost, no more than the reference.
  mixed::MixedOptions mo;
  mo.calib_tokens = toks;
  mo.sensitivity.n_ctx = 64;
  mo.sensitivity.n_windows = 1;
  mo.sensitivity.candidates = {Type::Q2_K, Type::Q4_K, Type::Q8_0};
  mo.target_bytes = f.file_size * 35 / 100;
  mo.mem_budget = small;
  const mixed::MixedRecipe r = mixed::plan_mixed(in, mo);
  EXPECT_EQ(r.cost_model, "stream");
  EXPECT_LE(r.stream_bytes_per_token, r.stream_bytes_per_token_ref * (1 + 1e-9));
  int priced = 0;
  for (const auto& e : r.entries) {
    if (e.kind == "ffn_gate_up" || e.kind == "ffn_down") {
      EXPECT_GT(e.miss_rate, 0.0) << e.group;
      ++priced;
    }
  }
  EXPECT_EQ(priced, 6);
}

}  // namespace
}  // namespace les::test
