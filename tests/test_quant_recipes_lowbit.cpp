// llama.cpp's low-bit recipes (IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M
// TQ1_0 TQ2_0 MXFP4_MOE Q2_K_S): every tensor's planned type equals llama-quantize's on three models
// (tests/data/recipes: the trained MoE with 128-wide expert rows that take llama.cpp's fallbacks, a
// qwen3moe of 8 experts and a hybrid qwen35moe with shared experts), the
// general.file_type numbers, the refusal without an importance matrix, the recipe names, and the
// low-bit types as mixed-precision candidates.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "les/convert/quantize_model.h"
#include "les/gguf/gguf.h"
#include "les/mixed/mixed_plan.h"
#include "les/mixed/tensor_groups.h"
#include "les/model/context.h"
#include "les/pack/pack.h"
#include "les/sched/streaming_experts.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "greedy_hashes.h"
#include "model_edit.h"
#include "test_util.h"

namespace les::test {
namespace {

const char* const kRecipes[] = {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S",  "IQ2_M",     "IQ3_XXS",
                                "IQ3_XS", "IQ3_S", "IQ3_M",  "TQ1_0",  "TQ2_0", "MXFP4_MOE", "Q2_K_S"};

struct FixtureTensor {
  std::string name;
  std::vector<int64_t> ne;
  std::string src_type;  // in the model llama-quantize read
};

struct FixtureRecipe {
  bool needs_imatrix = false;
  uint32_t file_type = 0;
  uint64_t bytes = 0;
  std::vector<std::string> types;  // llama-quantize's, one per tensor
};

struct Fixture {
  std::vector<FixtureTensor> tensors;
  std::map<std::string, FixtureRecipe> recipes;
};

Fixture load_fixture(const std::string& model) {
  const std::string path = source_dir() + "/tests/data/recipes/" + model + ".json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing test fixture " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str());
  Fixture f;
  for (const auto& t : j.at("tensors")) {
    f.tensors.push_back({t.at(0).get<std::string>(), t.at(1).get<std::vector<int64_t>>(), t.at(2).get<std::string>()});
  }
  for (const auto& [name, r] : j.at("recipes").items()) {
    FixtureRecipe fr;
    fr.needs_imatrix = r.at("needs_imatrix").get<bool>();
    fr.file_type = r.at("file_type").get<uint32_t>();
    fr.bytes = r.at("bytes").get<uint64_t>();
    fr.types = r.at("types").get<std::vector<std::string>>();
    EXPECT_EQ(fr.types.size(), f.tensors.size()) << path << " " << name;
    f.recipes[name] = fr;
  }
  return f;
}

// The synthetic models of tests/data/recipes/make_fixtures.sh (the same `les synth` flags).
synth::SynthSpec qwen3moe_spec() {
  synth::SynthSpec s = synth::shape_spec("tiny", Arch::qwen3moe);
  s.n_layer = 8;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 1;
  s.head_dim = 64;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 256;
  s.n_vocab = 512;
  s.type = "f16";
  return s;
}

synth::SynthSpec qwen35moe_spec() {
  synth::SynthSpec s = synth::shape_spec("qwen35-tiny");
  s.n_layer = 8;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_expert = 2;
  s.n_expert_used = 1;
  s.n_ff_exp = 256;
  s.n_ff_shexp = 256;
  s.ssm_d_state = 64;
  s.ssm_n_k_heads = 2;
  s.ssm_n_v_heads = 4;
  s.n_rot = 16;
  s.n_vocab = 512;
  s.type = "f16";
  return s;
}

// The model a fixture was made from: the trained MoE's tensors (the bundled Q4_K_M file has the
// F16 original's names and shapes) or the synthetic model written here.
std::string fixture_model(const std::string& model, const ScopedDir& d) {
  if (model == "trained") return tiny_moe_path();
  const std::string p = d.file(model + ".gguf");
  synth::write_synth_model(model == "synth-qwen3moe" ? qwen3moe_spec() : qwen35moe_spec(), p);
  return p;
}

int block_count(const gguf::File& f) {
  return static_cast<int>(f.get_int(f.get_string("general.architecture") + ".block_count"));
}

// The bytes of f converted with the plan: f's header, then every tensor's data padded to the
// alignment.
uint64_t planned_file_bytes(const gguf::File& f, QuantizePlan plan) {
  prepare_plan(plan, f);
  const int n_layer = block_count(f);
  uint64_t b = f.data_offset;
  for (const auto& t : f.tensors) {
    const Type ty = planned_type(plan, t.name, t.ne, t.type, n_layer);
    const uint64_t n = row_bytes(ty, t.ne[0]) * static_cast<uint64_t>(t.n_elements() / t.ne[0]);
    b += (n + f.alignment - 1) / f.alignment * f.alignment;
  }
  return b;
}

class RecipeFixture : public ::testing::TestWithParam<const char*> {};

// Every tensor of every recipe gets llama-quantize's type; the file type and the refusal without
// an importance matrix are llama-quantize's.
TEST_P(RecipeFixture, PlannedTypesEqualLlamaQuantize) {
  const std::string model = GetParam();
  const Fixture fx = load_fixture(model);
  ASSERT_EQ(fx.recipes.size(), std::size(kRecipes));
  ScopedDir d;
  const gguf::File f = gguf::read_file(fixture_model(model, d));
  // The fixture describes this model: the same tensors, names and shapes.
  ASSERT_EQ(f.tensors.size(), fx.tensors.size());
  for (const FixtureTensor& t : fx.tensors) {
    const gguf::TensorInfo* ti = f.find_tensor(t.name);
    ASSERT_NE(ti, nullptr) << t.name;
    EXPECT_EQ(ti->ne, t.ne) << t.name;
  }
  const int n_layer = block_count(f);
  for (const char* name : kRecipes) {
    SCOPED_TRACE(std::string(model) + " " + name);
    const FixtureRecipe& fr = fx.recipes.at(name);
    QuantizePlan plan = parse_quantize_plan(name);
    EXPECT_EQ(plan_file_type(plan), fr.file_type);
    plan.has_imatrix = true;  // the fixtures were made with one
    prepare_plan(plan, f);
    std::string mismatches;
    int n_converted = 0;
    for (size_t i = 0; i < fx.tensors.size(); ++i) {
      const FixtureTensor& t = fx.tensors[i];
      const auto src = parse_type(t.src_type);
      ASSERT_TRUE(src.has_value()) << t.src_type;
      const Type got = planned_type(plan, t.name, t.ne, *src, n_layer);
      if (got != *src) ++n_converted;
      if (type_name(got) != fr.types[i]) {
        mismatches += "  " + t.name + ": les " + type_name(got) + ", llama-quantize " + fr.types[i] + "\n";
      }
    }
    EXPECT_EQ(mismatches, "");
    EXPECT_GT(n_converted, 10);
    // The size the types give (data, aligned per tensor, after this model's header) is
    // llama-quantize's file size within 1 KiB of metadata.
    EXPECT_NEAR(static_cast<double>(planned_file_bytes(f, plan)), static_cast<double>(fr.bytes), 1024.0);
    // Refused without an importance matrix exactly where llama-quantize refuses.
    QuantizePlan bare = parse_quantize_plan(name);
    const std::string needing = first_tensor_needing_importance(bare, f);
    EXPECT_EQ(!needing.empty(), fr.needs_imatrix) << "first tensor needing one: '" << needing << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, RecipeFixture, ::testing::Values("trained", "synth-qwen3moe", "synth-qwen35moe"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// The fixtures exercise what the recipes do: every low-bit type, the fallbacks of 128-wide rows
// (IQ4_NL, Q4_0, Q8_0 on the trained model) and the K-quants the recipes mix in.
TEST(RecipeFixtures, CoverTheTypesAndFallbacks) {
  std::set<std::string> seen;
  for (const char* model : {"trained", "synth-qwen3moe", "synth-qwen35moe"}) {
    for (const auto& [name, r] : load_fixture(model).recipes) seen.insert(r.types.begin(), r.types.end());
  }
  for (const char* t : {"iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "tq1_0", "tq2_0", "mxfp4",
                        "iq4_nl", "q4_0", "q8_0", "q2_K", "q4_K", "q5_K", "q6_K"}) {
    EXPECT_TRUE(seen.count(t)) << t;
  }
  // The trained model's 128-wide expert down rows cannot take 256-element blocks.
  const Fixture tr = load_fixture("trained");
  size_t down = 0;
  while (down < tr.tensors.size() && tr.tensors[down].name != "blk.3.ffn_down_exps.weight") ++down;
  ASSERT_LT(down, tr.tensors.size());
  EXPECT_EQ(tr.recipes.at("IQ2_XXS").types[down], "iq4_nl");
  EXPECT_EQ(tr.recipes.at("TQ1_0").types[down], "q4_0");
}

TEST(RecipeNames, UpperCaseFtypesAndRecipeOnlyNamesInAnyCase) {
  struct Want { const char* name; Recipe recipe; Type base; };
  const Want wants[] = {
      {"IQ1_S", Recipe::iq1_s, Type::IQ1_S},       {"IQ1_M", Recipe::iq1_m, Type::IQ1_M},
      {"IQ2_XXS", Recipe::iq2_xxs, Type::IQ2_XXS}, {"IQ2_XS", Recipe::iq2_xs, Type::IQ2_XS},
      {"IQ2_S", Recipe::iq2_s, Type::IQ2_XS},      {"IQ2_M", Recipe::iq2_m, Type::IQ2_S},
      {"iq2_m", Recipe::iq2_m, Type::IQ2_S},       {"IQ3_XXS", Recipe::iq3_xxs, Type::IQ3_XXS},
      {"IQ3_XS", Recipe::iq3_xs, Type::IQ3_S},     {"iq3_xs", Recipe::iq3_xs, Type::IQ3_S},
      {"IQ3_S", Recipe::iq3_s, Type::IQ3_S},       {"IQ3_M", Recipe::iq3_m, Type::IQ3_S},
      {"iq3_m", Recipe::iq3_m, Type::IQ3_S},       {"TQ1_0", Recipe::tq1_0, Type::TQ1_0},
      {"TQ2_0", Recipe::tq2_0, Type::TQ2_0},       {"MXFP4_MOE", Recipe::mxfp4_moe, Type::MXFP4},
      {"mxfp4_moe", Recipe::mxfp4_moe, Type::MXFP4}, {"Q2_K_S", Recipe::q2_k_s, Type::Q2_K},
      {"q2_k_s", Recipe::q2_k_s, Type::Q2_K},
      // A type name in lower case is a pure file of that type, as q2_K is.
      {"iq2_xxs", Recipe::pure, Type::IQ2_XXS},    {"tq1_0", Recipe::pure, Type::TQ1_0},
      {"mxfp4", Recipe::pure, Type::MXFP4},        {"NVFP4", Recipe::pure, Type::NVFP4},
  };
  for (const Want& w : wants) {
    const QuantizePlan p = parse_quantize_plan(w.name);
    EXPECT_EQ(p.recipe, w.recipe) << w.name;
    EXPECT_EQ(p.base, w.base) << w.name;
  }
  // Pure files name the type's ftype (llama.cpp's guess for a file of mostly that type).
  EXPECT_EQ(plan_file_type(parse_quantize_plan("iq2_xxs")), 19u);
  EXPECT_EQ(plan_file_type(parse_quantize_plan("iq2_s")), 28u);
  EXPECT_EQ(plan_file_type(parse_quantize_plan("nvfp4")), 39u);
  EXPECT_NE(error_of([] { parse_quantize_plan("iq2_q"); }).find("iq2_m"), std::string::npos);
}

TEST(RecipeFallbacks, LlamaCppFallbackChain) {
  EXPECT_EQ(fitting_type(Type::IQ2_XXS, 128), Type::IQ4_NL);
  EXPECT_EQ(fitting_type(Type::IQ1_M, 96), Type::IQ4_NL);
  EXPECT_EQ(fitting_type(Type::IQ3_S, 256), Type::IQ3_S);
  EXPECT_EQ(fitting_type(Type::TQ2_0, 128), Type::Q4_0);
  EXPECT_EQ(fitting_type(Type::Q2_K, 64), Type::Q4_0);
  EXPECT_EQ(fitting_type(Type::MXFP4, 64), Type::MXFP4);
  EXPECT_EQ(fitting_type(Type::MXFP4, 48), Type::F16);   // no 32-element block fits: F16
  EXPECT_EQ(fitting_type(Type::IQ2_XS, 48), Type::F16);  // nor IQ4_NL's
}

// The first and the last 128-wide tensors of the synthetic qwen3moe at IQ2_XXS: refused without an
// importance matrix (naming --imatrix and the tensor) before the output is created, and refused
// when the importance matrix has nothing for a tensor that needs it.
TEST(RecipeImportance, RefusedWithoutAnImportanceMatrix) {
  ScopedDir d;
  const std::string in = fixture_model("synth-qwen3moe", d);
  const std::string out = d.file("out.gguf");
  const std::string e = error_of([&] { quantize_model(in, out, parse_quantize_plan("IQ2_XXS")); });
  EXPECT_NE(e.find("--imatrix"), std::string::npos) << e;
  EXPECT_NE(e.find("iq2_xxs"), std::string::npos) << e;
  EXPECT_NE(e.find("blk.0."), std::string::npos) << e;
  EXPECT_FALSE(file_exists(out));
  const ImportanceFn none = [](const std::string&, int, std::vector<float>&) -> const float* { return nullptr; };
  const std::string e2 = error_of([&] { quantize_model(in, out, parse_quantize_plan("IQ1_M"), {}, none); });
  EXPECT_NE(e2.find("no data for tensor"), std::string::npos) << e2;
  EXPECT_FALSE(file_exists(out));
  // The recipes without IQ1/IQ2/IQ3_XXS tensors need none; a type name is a pure file, and its
  // token embedding and output head need none either (as in llama-quantize).
  const gguf::File f = gguf::read_file(in);
  for (const char* r : {"IQ3_S", "IQ3_M", "TQ1_0", "TQ2_0", "MXFP4_MOE", "Q4_K_M"}) {
    EXPECT_EQ(first_tensor_needing_importance(parse_quantize_plan(r), f), "") << r;
  }
  EXPECT_EQ(first_tensor_needing_importance(parse_quantize_plan("iq2_xxs"), f), "blk.0.attn_q.weight");
  QuantizePlan p = parse_quantize_plan("IQ2_XXS");
  EXPECT_FALSE(needs_importance(p, "token_embd.weight", Type::IQ2_XXS));
  EXPECT_FALSE(needs_importance(p, "output.weight", Type::IQ1_S));
  EXPECT_TRUE(needs_importance(p, "blk.3.ffn_up_exps.weight", Type::IQ3_XXS));
  EXPECT_FALSE(needs_importance(p, "blk.3.ffn_up_exps.weight", Type::Q2_K));
  EXPECT_TRUE(needs_importance(parse_quantize_plan("Q2_K_S"), "blk.3.ffn_up_exps.weight", Type::Q2_K));
}

// Importance 1 for every column of every matrix (the sizes do not depend on the values).
const ImportanceFn kUniform = [](const std::string&, int, std::vector<float>& scratch) -> const float* {
  scratch.assign(4096, 1.0f);
  return scratch.data();
};

// The files les writes have llama-quantize's sizes (the same types; the header within 1 KiB):
// every recipe on the two synthetic models, and IQ2_XXS (its 128-wide rows' fallbacks) on the
// trained model.
TEST(RecipeFiles, SizesEqualLlamaQuantize) {
  ScopedDir d;
  struct Case { const char* model; std::vector<const char*> recipes; };
  std::vector<const char*> all(std::begin(kRecipes), std::end(kRecipes));
  const Case cases[] = {{"synth-qwen3moe", all}, {"synth-qwen35moe", all}, {"trained", {"IQ2_XXS"}}};
  for (const Case& c : cases) {
    const Fixture fx = load_fixture(c.model);
    const std::string in = fixture_model(c.model, d);
    for (const char* r : c.recipes) {
      SCOPED_TRACE(std::string(c.model) + " " + r);
      QuantizePlan plan = parse_quantize_plan(r);
      plan.n_threads = 2;
      const std::string out = d.file("out.gguf");
      quantize_model(in, out, plan, {}, kUniform);
      const gguf::File o = gguf::read_file(out);
      EXPECT_NEAR(static_cast<double>(o.file_size), static_cast<double>(fx.recipes.at(r).bytes), 1024.0);
      EXPECT_EQ(o.get_int("general.file_type"), fx.recipes.at(r).file_type);
      for (size_t i = 0; i < fx.tensors.size(); ++i) {
        const gguf::TensorInfo* t = o.find_tensor(fx.tensors[i].name);
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(type_name(t->type), fx.recipes.at(r).types[i]) << t->name;
      }
    }
  }
}

// --- mixed precision over the low-bit types ---------------------------------------------------

// A small F16 qwen3moe whose rows take the 256-element blocks (2 layers, 4 experts).
std::string small_f16_model(const ScopedDir& d) {
  synth::SynthSpec s = synth::shape_spec("tiny", Arch::qwen3moe);
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
  const std::string p = d.file("small.gguf");
  synth::write_synth_model(s, p);
  return p;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

mixed::MixedOptions small_mixed_options(uint64_t target, const std::vector<Type>& candidates) {
  mixed::MixedOptions mo;
  mo.calib_tokens = random_tokens(128, 300, 5);
  mo.sensitivity.n_ctx = 64;
  mo.sensitivity.n_windows = 1;
  mo.sensitivity.n_threads = 2;
  mo.sensitivity.candidates = candidates;
  mo.target_bytes = target;
  return mo;
}

// Without an importance matrix the types that need one are no candidates (never measured, never
// chosen) and the printed plan says so; with one they are measured and can be chosen.
TEST(MixedLowbit, ImportanceTypesOnlyWithAnImportanceMatrix) {
  ScopedDir d;
  const std::string in = small_f16_model(d);
  const gguf::File f = gguf::read_file(in);
  const std::vector<Type> cands = {Type::IQ1_S, Type::IQ2_XXS, Type::IQ2_S, Type::IQ3_XXS, Type::TQ2_0, Type::IQ3_S,
                                   Type::MXFP4};
  mixed::SensitivityReport rep;
  mixed::MixedOptions mo = small_mixed_options(f.file_size * 22 / 100, cands);
  mo.report_out = &rep;
  const mixed::MixedRecipe r = mixed::plan_mixed(in, mo);
  const std::vector<Type> excluded = {Type::IQ1_S, Type::IQ2_XXS, Type::IQ2_S, Type::IQ3_XXS};
  std::vector<Type> got = r.excluded_types;
  std::sort(got.begin(), got.end());
  std::vector<Type> want = excluded;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_NE(mixed::format_recipe(r).find("not candidates without an importance matrix (--imatrix): iq1_s iq2_xxs "
                                         "iq2_s iq3_xxs"),
            std::string::npos)
      << mixed::format_recipe(r);
  std::set<Type> measured;
  for (const auto& g : rep.groups) {
    for (const auto& c : g.candidates) measured.insert(c.type);
  }
  for (Type t : excluded) EXPECT_FALSE(measured.count(t)) << type_name(t);
  EXPECT_TRUE(measured.count(Type::TQ2_0));
  EXPECT_TRUE(measured.count(Type::IQ3_S));
  for (const auto& e : r.entries) EXPECT_FALSE(quantizer_needs_importance(e.type)) << e.group;

  // With an importance matrix (uniform): measured, and below the size of TQ2_0 everywhere (the
  // smallest type without one) some group takes one.
  const ImportanceFn ones = [](const std::string& name, int, std::vector<float>& scratch) -> const float* {
    (void)name;
    scratch.assign(256, 1.0f);
    return scratch.data();
  };
  mixed::SensitivityReport rep2;
  mixed::MixedOptions mo2 = small_mixed_options(f.file_size * 115 / 1000, cands);
  mo2.importance = ones;
  mo2.report_out = &rep2;
  const mixed::MixedRecipe r2 = mixed::plan_mixed(in, mo2);
  EXPECT_TRUE(r2.excluded_types.empty());
  EXPECT_EQ(mixed::format_recipe(r2).find("not candidates"), std::string::npos);
  std::set<Type> measured2, chosen2;
  for (const auto& g : rep2.groups) {
    for (const auto& c : g.candidates) measured2.insert(c.type);
  }
  for (const auto& e : r2.entries) chosen2.insert(e.type);
  for (Type t : excluded) EXPECT_TRUE(measured2.count(t)) << type_name(t);
  EXPECT_TRUE(std::any_of(chosen2.begin(), chosen2.end(), [](Type t) { return quantizer_needs_importance(t); }));
  // A saved sensitivity measured with an importance matrix, used without one: those types drop out.
  mixed::MixedOptions mo3 = small_mixed_options(f.file_size * 22 / 100, cands);
  mo3.measured = &rep2;
  const mixed::MixedRecipe r3 = mixed::plan_mixed(in, mo3);
  for (const auto& e : r3.entries) EXPECT_FALSE(quantizer_needs_importance(e.type)) << e.group;
}

// A file of every low-bit type (as a mixed-precision plan writes it: overrides) loads, runs, packs
// and streams: the packed file's logits, resident and streamed, equal the unpacked file's.
TEST(MixedLowbit, EveryLowbitTypeRunsPacksAndStreams) {
  ScopedDir d;
  const std::string in = small_f16_model(d);
  QuantizePlan plan;
  plan.recipe = Recipe::pure;
  plan.keep_unlisted = true;
  plan.n_threads = 2;
  const std::pair<const char*, Type> types[] = {
      {"token_embd.weight", Type::TQ2_0},           {"output.weight", Type::NVFP4},
      {"blk.0.attn_q.weight", Type::IQ2_XS},        {"blk.0.attn_k.weight", Type::IQ2_S},
      {"blk.0.attn_v.weight", Type::IQ3_XXS},       {"blk.0.attn_output.weight", Type::IQ3_S},
      {"blk.0.ffn_gate_exps.weight", Type::IQ1_S},  {"blk.0.ffn_up_exps.weight", Type::IQ1_M},
      {"blk.0.ffn_down_exps.weight", Type::IQ2_XXS}, {"blk.1.attn_q.weight", Type::MXFP4},
      {"blk.1.attn_k.weight", Type::Q2_K},          {"blk.1.attn_v.weight", Type::NVFP4},
      {"blk.1.attn_output.weight", Type::TQ1_0},    {"blk.1.ffn_gate_exps.weight", Type::TQ1_0},
      {"blk.1.ffn_up_exps.weight", Type::TQ2_0},    {"blk.1.ffn_down_exps.weight", Type::MXFP4},
  };
  for (const auto& [name, t] : types) plan.overrides[name] = t;
  const std::string q = d.file("lowbit.gguf");
  quantize_model(in, q, plan, {}, kUniform);
  const gguf::File f = gguf::read_file(q);
  for (const auto& [name, t] : types) {
    ASSERT_NE(f.find_tensor(name), nullptr) << name;
    EXPECT_EQ(f.find_tensor(name)->type, t) << name;
  }
  const std::string packed = d.file("lowbit.packed.gguf");
  pack::pack_model(q, packed);
  EXPECT_TRUE(pack::verify_packed(packed).ok());
  const std::vector<int32_t> prompt = {11, 97, 203, 5, 88, 201, 42, 7};
  auto m = Model::load(q);
  const std::vector<uint64_t> ref = greedy_hashes(*m, nullptr, prompt, 6);
  auto resident = Model::load(packed);
  ASSERT_NE(resident->packed(), nullptr);
  EXPECT_EQ(greedy_hashes(*resident, nullptr, prompt, 6), ref) << "packed, resident";
  auto streamed = Model::load(packed, LoadOptions{.map_experts = false});
  StreamingExperts ex(*streamed, stream_opts(*streamed, Schedule::ondemand, storage::IoMode::pread, 2));
  EXPECT_EQ(greedy_hashes(*streamed, &ex, prompt, 6), ref) << "packed, streamed";
  EXPECT_GT(ex.stats().total().misses, 0u);
  // The low-bit file is a different model from the F16 one, not a copy.
  auto f16 = Model::load(in);
  EXPECT_NE(greedy_hashes(*f16, nullptr, prompt, 6), ref);
}

}  // namespace
}  // namespace les::test
