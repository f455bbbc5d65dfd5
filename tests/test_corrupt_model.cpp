// Corrupt model files built by the test from a small synthetic model, at the level of the model
// loader, the tokenizer and les verify (the GGUF container's own faults are in test_gguf.cpp):
// wrong metadata types per key, huge or inconsistent dimensions, truncation at every tensor
// boundary, non-weight tensor types, and NaN / infinite weights and block scales. Each must be a
// les::Error (or a verify problem) whose message names the key, tensor or block.
#include <cstddef>
#include <cstring>
#include <limits>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "load_modes.h"

#include "les/model/context.h"
#include "les/model/model.h"
#include "les/pack/pack.h"
#include "les/quant/blocks.h"
#include "les/quant/finite.h"
#include "les/session/generate.h"
#include "les/tokenizer/tokenizer.h"
#include "model_edit.h"

using namespace les;
using les::test::error_of;
using les::test::find_kv;
using les::test::KvList;
using les::test::rewrite_model;
using les::test::ScopedDir;
using les::test::TensorEdit;

namespace {

gguf::Value str_value(const std::string& s) {
  gguf::Value v;
  v.type = gguf::ValueType::STRING;
  v.str = s;
  return v;
}
gguf::Value u64_value(uint64_t x) {
  gguf::Value v;
  v.type = gguf::ValueType::UINT64;
  v.u64 = x;
  return v;
}
gguf::Value f32_value(double x) {
  gguf::Value v;
  v.type = gguf::ValueType::FLOAT32;
  v.f64 = x;
  return v;
}
gguf::Value array_value(gguf::ValueType elem, std::vector<gguf::Value> items) {
  gguf::Value v;
  v.type = gguf::ValueType::ARRAY;
  v.elem_type = elem;
  v.arr = std::move(items);
  return v;
}

// Loads the model and its tokenizer as `les run` does.
void load_all(const std::string& path) {
  auto m = Model::load(path);
  Tokenizer tok(vocab_from_gguf(m->gguf()));
}

void expect_words(const std::string& msg, std::initializer_list<const char*> words, const std::string& ctx) {
  EXPECT_FALSE(msg.empty()) << ctx << ": accepted";
  for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << ctx << ": '" << w << "' not in: " << msg;
}

// Replaces one key's value; the error on loading must name the key.
void expect_key_error(const std::string& src, const std::string& dir, const std::string& key, gguf::Value v,
                      std::initializer_list<const char*> more = {}) {
  const std::string out = dir + "/edited.gguf";
  rewrite_model(src, out, [&](KvList& kv) {
    gguf::Value* slot = find_kv(kv, key);
    ASSERT_NE(slot, nullptr) << key;
    *slot = std::move(v);
  });
  const std::string msg = error_of([&] { load_all(out); });
  expect_words(msg, {key.c_str()}, key);
  for (const char* w : more) EXPECT_NE(msg.find(w), std::string::npos) << key << ": '" << w << "' not in: " << msg;
}

}  // namespace

TEST(CorruptModel, WrongMetadataTypesNameTheKey) {
  ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf");
  ASSERT_NO_THROW(load_all(src));
  using VT = gguf::ValueType;
  expect_key_error(src, d.path, "general.architecture", u64_value(3));
  expect_key_error(src, d.path, "qwen3moe.block_count", str_value("two"));
  expect_key_error(src, d.path, "qwen3moe.embedding_length", f32_value(32.0));
  expect_key_error(src, d.path, "qwen3moe.attention.head_count", array_value(VT::STRING, {str_value("2")}));
  expect_key_error(src, d.path, "qwen3moe.attention.head_count_kv", str_value("1"));
  expect_key_error(src, d.path, "qwen3moe.context_length", f32_value(64.5));
  expect_key_error(src, d.path, "qwen3moe.expert_count", str_value("4"));
  expect_key_error(src, d.path, "qwen3moe.rope.freq_base", str_value("10000"));
  expect_key_error(src, d.path, "qwen3moe.attention.layer_norm_rms_epsilon", str_value("1e-6"));
  expect_key_error(src, d.path, "tokenizer.ggml.model", u64_value(2));
  expect_key_error(src, d.path, "tokenizer.ggml.tokens", array_value(VT::UINT64, {u64_value(1)}));
  expect_key_error(src, d.path, "tokenizer.ggml.token_type", array_value(VT::STRING, {str_value("x")}));
  expect_key_error(src, d.path, "tokenizer.ggml.merges", u64_value(7));
  expect_key_error(src, d.path, "tokenizer.ggml.eos_token_id", str_value("</s>"));
  expect_key_error(src, d.path, "tokenizer.ggml.add_bos_token", str_value("yes"));
}

TEST(CorruptModel, HugeOrInconsistentDimensionsNameTheKeyOrTensor) {
  ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf");
  // Out of the accepted range: refused before anything is allocated.
  expect_key_error(src, d.path, "qwen3moe.block_count", u64_value(uint64_t(1) << 40), {"out of range"});
  expect_key_error(src, d.path, "qwen3moe.embedding_length", u64_value(uint64_t(1) << 31), {"out of range"});
  expect_key_error(src, d.path, "qwen3moe.attention.head_count", u64_value(~uint64_t(0)));
  expect_key_error(src, d.path, "qwen3moe.context_length", u64_value(uint64_t(1) << 40), {"out of range"});
  expect_key_error(src, d.path, "qwen3moe.expert_count", u64_value(uint64_t(1) << 20), {"out of range"});
  expect_key_error(src, d.path, "qwen3moe.expert_used_count", u64_value(5), {"expert_used_count"});
  {
    const std::string out = d.file("kv3.gguf");
    rewrite_model(src, out, [](KvList& kv) { find_kv(kv, "qwen3moe.attention.head_count_kv")->u64 = 3; });
    expect_words(error_of([&] { load_all(out); }), {"head_count 2 is not a multiple of head_count_kv 3"}, "kv 3");
  }
  // In range but disagreeing with the tensors: the loader names the tensor and both shapes.
  const std::string out = d.file("dims.gguf");
  rewrite_model(src, out, [](KvList& kv) { find_kv(kv, "qwen3moe.embedding_length")->u64 = 64; });
  expect_words(error_of([&] { load_all(out); }), {"token_embd.weight", "has shape [32, 259]", "expected [64, 259]"},
               "embedding 64");
  rewrite_model(src, out, [](KvList& kv) { find_kv(kv, "qwen3moe.block_count")->u64 = 3; });
  expect_words(error_of([&] { load_all(out); }), {"missing tensor 'blk.2."}, "3 layers");
  rewrite_model(src, out, [](KvList& kv) { find_kv(kv, "qwen3moe.block_count")->u64 = 1; });
  expect_words(error_of([&] { load_all(out); }), {"tensor 'blk.1.", "not used"}, "1 layer");
  rewrite_model(src, out, [](KvList& kv) { find_kv(kv, "qwen3moe.expert_count")->u64 = 3; });
  expect_words(error_of([&] { load_all(out); }), {"ffn_gate_inp.weight", "has shape"}, "3 experts");
  // A tokenizer whose token count disagrees with the embedding rows.
  rewrite_model(src, out, [](KvList& kv) { find_kv(kv, "tokenizer.ggml.tokens")->arr.pop_back(); });
  expect_words(error_of([&] { load_all(out); }), {"258 tokens", "token_embd.weight has 259 rows"}, "vocab");
}

// Every cut at a tensor boundary (and one byte either side) of the data section, and inside the
// header, is refused at load (resident and streaming) and by les verify, naming what is cut.
TEST(CorruptModel, TruncationAtEveryTensorBoundary) {
  ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf");
  const gguf::File f = gguf::read_file(src);
  const std::vector<uint8_t> bytes = les::test::read_bytes(src);
  std::vector<uint64_t> cuts = {0, 4, 8, 16, 24, f.data_offset / 2, f.data_offset - 1, f.data_offset};
  for (const auto& t : f.tensors) {
    const uint64_t a = f.data_offset + t.offset, b = a + t.n_bytes;
    for (uint64_t c : {a, a + 1, b - 1}) cuts.push_back(c);
  }
  const std::string out = d.file("cut.gguf");
  int checked = 0;
  for (uint64_t c : cuts) {
    if (c >= bytes.size()) continue;
    les::test::write_file_bytes(out, bytes.data(), static_cast<size_t>(c));
    const std::string ctx = "cut at " + std::to_string(c);
    for (const auto& load_mode : les::test::every_load_mode()) {
      // (no structured binding: clang 14 cannot capture one in a lambda)
      const std::string& mode = load_mode.first;
      const LoadOptions& lo = load_mode.second;
      const std::string msg = error_of([&] { Model::load(out, lo); });
      ASSERT_FALSE(msg.empty()) << ctx << " accepted (" << mode << ")";
      const bool says = msg.find("truncated") != std::string::npos || msg.find("past the end") != std::string::npos ||
                        msg.find("does not fit") != std::string::npos || msg.find("bad magic") != std::string::npos ||
                        msg.find("bytes left") != std::string::npos;
      EXPECT_TRUE(says) << ctx << " (" << mode << "): " << msg;
      EXPECT_NE(msg.find(out), std::string::npos) << ctx << ": no path in " << msg;
    }
    if (c > f.data_offset) {
      // The message names the first tensor that no longer fits.
      for (const auto& t : f.tensors) {
        if (f.data_offset + t.offset + t.n_bytes > c) {
          EXPECT_NE(error_of([&] { Model::load(out); }).find("'" + t.name + "'"), std::string::npos) << ctx;
          break;
        }
      }
    }
    EXPECT_FALSE(error_of([&] { pack::verify_weights(out); }).empty()) << ctx;
    ++checked;
  }
  EXPECT_GT(checked, 3 * static_cast<int>(f.tensors.size()));
}

TEST(CorruptModel, NonWeightTypeForAMatrixIsRefused) {
  ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf", "f32");
  const gguf::File f = gguf::read_file(src);
  const MappedFile map = MappedFile::open(src);
  // blk.0.attn_q.weight stored as I32 (same byte size as F32): a known type but not a weight type.
  gguf::Writer w;
  for (const auto& [k, v] : f.kv) w.add(k, v);
  for (const auto& t : f.tensors) {
    const Type type = t.name == "blk.0.attn_q.weight" ? Type::I32 : t.type;
    w.add_tensor(t.name, t.ne, type, static_cast<const void*>(map.data() + f.data_offset + t.offset));
  }
  const std::string out = d.file("i32.gguf");
  w.write(out);
  expect_words(error_of([&] { load_all(out); }), {"blk.0.attn_q.weight", "i32", "not a weight type"}, "i32");
}

// An NVFP4 conversion's second-level scale tensors (llama.cpp multiplies the product by them):
// refused by name, never silently ignored.
TEST(CorruptModel, WeightScaleTensorsAreRefused) {
  ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf", "f32");
  const gguf::File f = gguf::read_file(src);
  const MappedFile map = MappedFile::open(src);
  for (const char* extra : {"blk.0.attn_q.scale", "blk.0.ffn_up_exps.input_scale"}) {
    gguf::Writer w;
    for (const auto& [k, v] : f.kv) w.add(k, v);
    for (const auto& t : f.tensors) {
      w.add_tensor(t.name, t.ne, t.type, static_cast<const void*>(map.data() + f.data_offset + t.offset));
    }
    const float one = 1.0f;
    w.add_tensor(extra, {1}, Type::F32, &one);
    const std::string out = d.file("scaled.gguf");
    w.write(out);
    expect_words(error_of([&] { load_all(out); }), {extra, "second-level scales", "not supported"}, extra);
  }
}

// --- non-finite values ----------------------------------------------------------------------

TEST(CorruptModel, FindNonFiniteEveryTypeAndScaleField) {
  struct Case {
    Type t;
    std::vector<std::pair<size_t, const char*>> fields;  // byte offset in the block, name
    bool f32_scale;
  };
  const std::vector<Case> cases = {
      {Type::Q4_0, {{offsetof(block_q4_0, d), "d"}}, false},
      {Type::Q4_1, {{offsetof(block_q4_1, d), "d"}, {offsetof(block_q4_1, m), "m"}}, false},
      {Type::Q5_0, {{offsetof(block_q5_0, d), "d"}}, false},
      {Type::Q5_1, {{offsetof(block_q5_1, d), "d"}, {offsetof(block_q5_1, m), "m"}}, false},
      {Type::Q8_0, {{offsetof(block_q8_0, d), "d"}}, false},
      {Type::Q8_1, {{offsetof(block_q8_1, d), "d"}, {offsetof(block_q8_1, s), "s"}}, false},
      {Type::Q2_K, {{offsetof(block_q2_K, d), "d"}, {offsetof(block_q2_K, dmin), "dmin"}}, false},
      {Type::Q3_K, {{offsetof(block_q3_K, d), "d"}}, false},
      {Type::Q4_K, {{offsetof(block_q4_K, d), "d"}, {offsetof(block_q4_K, dmin), "dmin"}}, false},
      {Type::Q5_K, {{offsetof(block_q5_K, d), "d"}, {offsetof(block_q5_K, dmin), "dmin"}}, false},
      {Type::Q6_K, {{offsetof(block_q6_K, d), "d"}}, false},
      {Type::Q8_K, {{offsetof(block_q8_K, d), "d"}}, true},
      {Type::IQ4_NL, {{offsetof(block_iq4_nl, d), "d"}}, false},
      {Type::IQ4_XS, {{offsetof(block_iq4_xs, d), "d"}}, false},
      {Type::IQ2_XXS, {{offsetof(block_iq2_xxs, d), "d"}}, false},
      {Type::IQ2_XS, {{offsetof(block_iq2_xs, d), "d"}}, false},
      {Type::IQ2_S, {{offsetof(block_iq2_s, d), "d"}}, false},
      {Type::IQ3_XXS, {{offsetof(block_iq3_xxs, d), "d"}}, false},
      {Type::IQ3_S, {{offsetof(block_iq3_s, d), "d"}}, false},
      {Type::IQ1_S, {{offsetof(block_iq1_s, d), "d"}}, false},
      {Type::TQ1_0, {{offsetof(block_tq1_0, d), "d"}}, false},
      {Type::TQ2_0, {{offsetof(block_tq2_0, d), "d"}}, false},
  };
  for (const Case& c : cases) {
    const TypeInfo& ti = info(c.t);
    for (const auto& [off, name] : c.fields) {
      for (bool nan : {true, false}) {
        std::vector<uint8_t> buf(3 * ti.block_bytes, 0x11);  // every other field: finite 0x1111
        for (int b = 0; b < 3; ++b) {
          for (const auto& fo : c.fields) std::memset(buf.data() + b * ti.block_bytes + fo.first, 0, c.f32_scale ? 4 : 2);
        }
        EXPECT_FALSE(find_nonfinite(c.t, buf.data(), 3 * ti.block_size)) << type_name(c.t);
        uint8_t* p = buf.data() + 2 * ti.block_bytes + off;
        if (c.f32_scale) {
          const uint32_t u = nan ? 0x7fc00000u : 0xff800000u;
          std::memcpy(p, &u, 4);
        } else {
          const uint16_t h = nan ? 0x7e00 : 0xfc00;
          std::memcpy(p, &h, 2);
        }
        const auto nf = find_nonfinite(c.t, buf.data(), 3 * ti.block_size);
        ASSERT_TRUE(nf) << type_name(c.t) << " " << name;
        EXPECT_EQ(nf->block, 2) << type_name(c.t);
        EXPECT_STREQ(nf->field, name) << type_name(c.t);
        EXPECT_EQ(nf->nan, nan) << type_name(c.t);
        const std::string msg = describe_nonfinite(c.t, *nf);
        EXPECT_NE(msg.find("block 2"), std::string::npos) << msg;
        EXPECT_NE(msg.find(nan ? "NaN" : "infinite"), std::string::npos) << msg;
      }
    }
  }
  // Plain floats: the element index.
  const float fv[4] = {1.0f, -2.0f, std::numeric_limits<float>::infinity(), 0.0f};
  auto nf = find_nonfinite(Type::F32, fv, 4);
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->block, 2);
  EXPECT_FALSE(nf->nan);
  const uint16_t hv[3] = {0x3c00, 0x7c01, 0x7c00};  // 1.0, NaN, inf
  nf = find_nonfinite(Type::F16, hv, 3);
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->block, 1);
  EXPECT_TRUE(nf->nan);
  const uint16_t bv[2] = {0x3f80, 0xff80};  // 1.0, -inf
  nf = find_nonfinite(Type::BF16, bv, 2);
  ASSERT_TRUE(nf);
  EXPECT_EQ(describe_nonfinite(Type::BF16, *nf), "element 1 is infinite");
  const int8_t iv[4] = {-1, 127, 0, 5};
  EXPECT_FALSE(find_nonfinite(Type::I8, iv, 4));
}

// The scales without an fp16 field of their own: IQ1_M's super-scale (the top nibbles of its four
// scale words), MXFP4's E8M0 exponent (0xff is NaN) and NVFP4's UE4M3 scales (all finite).
TEST(CorruptModel, FindNonFiniteSpreadAndByteScales) {
  {
    std::vector<uint8_t> buf(3 * sizeof(block_iq1_m), 0x0f);  // top nibbles 0: d = +0
    EXPECT_FALSE(find_nonfinite(Type::IQ1_M, buf.data(), 3 * QK_K));
    for (const uint16_t h : {uint16_t{0x7e00}, uint16_t{0xfc00}, uint16_t{0x7c00}}) {
      std::vector<uint8_t> b = buf;
      uint8_t* sc = b.data() + 1 * sizeof(block_iq1_m) + offsetof(block_iq1_m, scales);
      for (int k = 0; k < 4; ++k) sc[2 * k + 1] = static_cast<uint8_t>(0x0f | (((h >> (4 * k)) & 0xf) << 4));
      const auto nf = find_nonfinite(Type::IQ1_M, b.data(), 3 * QK_K);
      ASSERT_TRUE(nf) << h;
      EXPECT_EQ(nf->block, 1);
      EXPECT_STREQ(nf->field, "d");
      EXPECT_EQ(nf->nan, h == 0x7e00);
      // The low 12 bits of each scale word are the group scales: any value there is finite.
      for (int k = 0; k < 4; ++k) sc[2 * k + 1] = 0x0f;
      EXPECT_FALSE(find_nonfinite(Type::IQ1_M, b.data(), 3 * QK_K));
    }
  }
  {
    std::vector<uint8_t> buf(4 * sizeof(block_mxfp4), 0xff);
    for (int b = 0; b < 4; ++b) buf[b * sizeof(block_mxfp4)] = static_cast<uint8_t>(b == 0 ? 0 : 0xfe);
    EXPECT_FALSE(find_nonfinite(Type::MXFP4, buf.data(), 4 * QK_MXFP4));  // codes 0xff are fine
    buf[3 * sizeof(block_mxfp4)] = 0xff;
    const auto nf = find_nonfinite(Type::MXFP4, buf.data(), 4 * QK_MXFP4);
    ASSERT_TRUE(nf);
    EXPECT_EQ(nf->block, 3);
    EXPECT_STREQ(nf->field, "e");
    EXPECT_TRUE(nf->nan);
    EXPECT_NE(describe_nonfinite(Type::MXFP4, *nf).find("elements 96..127"), std::string::npos);
  }
  {
    std::vector<uint8_t> buf(2 * sizeof(block_nvfp4));
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(0x7f + 0x80 * (i & 1));
    EXPECT_FALSE(find_nonfinite(Type::NVFP4, buf.data(), 2 * QK_NVFP4));
  }
}

namespace {

// Sets block `block`'s d of a q8_0 tensor to the binary16 bits h.
TensorEdit set_q8_0_scale(const std::string& tensor, int64_t block, uint16_t h) {
  return [=](const std::string& name, Type type, uint8_t* data, uint64_t) {
    if (name != tensor) return;
    ASSERT_EQ(type, Type::Q8_0) << name;
    std::memcpy(data + static_cast<size_t>(block) * sizeof(block_q8_0) + offsetof(block_q8_0, d), &h, 2);
  };
}

}  // namespace

TEST(CorruptModel, NanOrInfiniteScalesAreNamedByVerifyAndStopGeneration) {
  ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf");
  {
    const pack::VerifySummary v = pack::verify_weights(src);
    EXPECT_TRUE(v.ok()) << v.problems[0];
    EXPECT_EQ(v.tensors, static_cast<int64_t>(gguf::read_file(src).tensors.size()));
  }
  // output.weight (q8_0 [32, 259]): row 7 is block 7; its scale NaN makes logit 7 NaN.
  const std::string bad = d.file("nan-output.gguf");
  rewrite_model(src, bad, {}, set_q8_0_scale("output.weight", 7, 0x7e00));
  pack::VerifySummary v = pack::verify_weights(bad);
  ASSERT_EQ(v.problems.size(), 1u);
  for (const char* w : {"tensor 'output.weight'", "q8_0", "block 7 (elements 224..255)", "scale d is NaN"}) {
    EXPECT_NE(v.problems[0].find(w), std::string::npos) << v.problems[0];
  }
  // Matrices are not scanned at load (that would read the whole file); generation refuses the
  // non-finite logits instead of sampling from them.
  auto m = Model::load(bad);
  Tokenizer tok(vocab_from_gguf(m->gguf()));
  Context ctx(*m, ContextParams{.n_ctx = 16, .n_threads = 1});
  GenerateParams gp;
  gp.n_predict = 4;
  const std::string msg = error_of([&] { generate(ctx, tok, {5, 6, 7}, gp, {}); });
  for (const char* w : {"non-finite logit (NaN) for token 7", "les verify"}) {
    EXPECT_NE(msg.find(w), std::string::npos) << msg;
  }

  // An infinite scale in a routed expert: verify names the tensor; once packed, verify names
  // the layer, expert and part.
  const std::string inf = d.file("inf-expert.gguf");
  // ffn_down_exps [32, 32, 4] q8_0: one block per row, 32 rows per expert; block 70 = expert 2.
  rewrite_model(src, inf, {}, set_q8_0_scale("blk.1.ffn_down_exps.weight", 70, 0x7c00));
  v = pack::verify_weights(inf);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].find("tensor 'blk.1.ffn_down_exps.weight' (q8_0): block 70"), std::string::npos)
      << v.problems[0];
  EXPECT_NE(v.problems[0].find("infinite"), std::string::npos) << v.problems[0];
  const std::string packed = d.file("inf-expert.packed.gguf");
  pack::pack_model(inf, packed);
  v = pack::verify_weights(packed);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].find("layer 1, expert 2: down (blk.1.ffn_down_exps.weight, q8_0): block 6"),
            std::string::npos) << v.problems[0];
}

TEST(CorruptModel, NonFiniteNormIsRefusedAtLoad) {
  ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf");
  const std::string bad = d.file("nan-norm.gguf");
  rewrite_model(src, bad, {}, [](const std::string& name, Type type, uint8_t* data, uint64_t) {
    if (name != "blk.1.ffn_norm.weight") return;
    ASSERT_EQ(type, Type::F32);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(data + 5 * sizeof(float), &nan, sizeof(float));
  });
  for (const auto& load_mode : les::test::every_load_mode()) {
    // (no structured binding: clang 14 cannot capture one in a lambda)
    const std::string& mode = load_mode.first;
    const LoadOptions& lo = load_mode.second;
    const std::string msg = error_of([&] { Model::load(bad, lo); });
    for (const char* w : {"tensor 'blk.1.ffn_norm.weight'", "element 5 is NaN"}) {
      EXPECT_NE(msg.find(w), std::string::npos) << mode << ": " << msg;
    }
  }
}

// A header that declares more embedding rows than an int holds (the data would be a file of
// several GiB, so the header is edited in memory): refused, not narrowed.
TEST(CorruptModel, HugeVocabularyRowsAreRefused) {
  ScopedDir d;
  gguf::File f = gguf::read_file(les::test::small_synth_model(d, "m.gguf"));
  for (auto& t : f.tensors) {
    if (t.name == "token_embd.weight") t.ne[1] = int64_t(1) << 31;
  }
  std::erase_if(f.kv, [](const auto& kv) { return kv.first == "tokenizer.ggml.tokens"; });
  const std::string msg = error_of([&] { config_from_gguf(f, "huge.gguf"); });
  EXPECT_NE(msg.find("token_embd.weight has 2147483648 rows"), std::string::npos) << msg;
}
