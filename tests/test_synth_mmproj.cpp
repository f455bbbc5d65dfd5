// Synthetic minicpmv4_6 vision projectors (les synth --mmproj-shape) and text vocabularies with
// MiniCPM-V's image marker tokens: every key and tensor as llama.cpp's clip.cpp loads them, for
// both merge factors and every weight type; determinism; clear validation errors; the image
// tokens as single control tokens; the default vocabulary unchanged. Tiny shapes only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/synth/mmproj_spec.h"
#include "les/synth/synth.h"
#include "les/synth/vocab.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"
#include "test_util.h"

using namespace les;
using namespace les::synth;

namespace {

std::string tmp_path(const std::string& name) {
  static const std::string dir = les::test::temp_dir();
  return dir + "/" + name;
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const les::Error& e) {
    return e.what();
  }
  return "";
}

struct Expected {
  std::vector<int64_t> ne;
  Type type;
};

// The tensors llama.cpp's clip.cpp loads for a minicpmv4_6 projector, written out from the
// layout (not from the writer's code): GGUF dims in ggml's ne order, ne[0] = a matrix's input width.
std::map<std::string, Expected> expected_tensors(const MmprojSpec& s) {
  const Type wt = s.type == "f32" ? Type::F32 : s.type == "f16" ? Type::F16 : Type::Q8_0;
  auto mat_type = [&](int64_t ne0) { return wt == Type::Q8_0 && ne0 % 32 != 0 ? Type::F16 : wt; };
  const int64_t E = s.n_embd, F = s.n_ff, P = s.patch_size, T = s.text_embd;
  const int64_t FV = s.n_ff_vit_merger ? s.n_ff_vit_merger : 4 * E, FM = s.n_ff_merger ? s.n_ff_merger : 4 * E;
  std::map<std::string, Expected> m;
  auto mat = [&](const std::string& n, int64_t in, int64_t out) { m[n] = {{in, out}, mat_type(in)}; };
  auto vec = [&](const std::string& n, int64_t len) { m[n] = {{len}, Type::F32}; };
  m["v.patch_embd.weight"] = {{P, P, 3, E}, wt == Type::F32 ? Type::F32 : Type::F16};
  vec("v.patch_embd.bias", E);
  m["v.position_embd.weight"] = {{E, static_cast<int64_t>(s.n_pos_side) * s.n_pos_side}, Type::F32};
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string b = "v.blk." + std::to_string(il) + ".";
    for (const char* p : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      mat(b + p + ".weight", E, E);
      vec(b + p + ".bias", E);
    }
    for (const char* p : {"ln1", "ln2"}) {
      vec(b + p + ".weight", E);
      vec(b + p + ".bias", E);
    }
    mat(b + "ffn_up.weight", E, F);
    vec(b + "ffn_up.bias", F);
    mat(b + "ffn_down.weight", F, E);
    vec(b + "ffn_down.bias", E);
  }
  vec("v.post_ln.weight", E);
  vec("v.post_ln.bias", E);
  if (s.n_merge == 4) {
    vec("v.vit_merger.ln1.weight", E);
    vec("v.vit_merger.ln1.bias", E);
    for (const char* p : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
      mat(std::string("v.vit_merger.") + p + ".weight", E, E);
      vec(std::string("v.vit_merger.") + p + ".bias", E);
    }
    vec("v.vit_merger.ds_ln.weight", 4 * E);
    vec("v.vit_merger.ds_ln.bias", 4 * E);
    mat("v.vit_merger.ds_ffn_up.weight", 4 * E, FV);
    vec("v.vit_merger.ds_ffn_up.bias", FV);
    mat("v.vit_merger.ds_ffn_down.weight", FV, E);
    vec("v.vit_merger.ds_ffn_down.bias", E);
  }
  vec("mm.input_norm.weight", 4 * E);
  vec("mm.input_norm.bias", 4 * E);
  mat("mm.up.weight", 4 * E, FM);
  vec("mm.up.bias", FM);
  mat("mm.down.weight", FM, T);
  vec("mm.down.bias", T);
  return m;
}

void expect_u32(const gguf::File& f, const std::string& key, uint64_t v) {
  const gguf::Value* x = f.find(key);
  ASSERT_NE(x, nullptr) << key;
  EXPECT_EQ(x->type, gguf::ValueType::UINT32) << key;
  EXPECT_EQ(x->u64, v) << key;
}

void expect_bool(const gguf::File& f, const std::string& key, bool v) {
  const gguf::Value* x = f.find(key);
  ASSERT_NE(x, nullptr) << key;
  EXPECT_EQ(x->type, gguf::ValueType::BOOL) << key;
  EXPECT_EQ(x->u64 != 0, v) << key;
}

void expect_string(const gguf::File& f, const std::string& key, const std::string& v) {
  const gguf::Value* x = f.find(key);
  ASSERT_NE(x, nullptr) << key;
  EXPECT_EQ(x->type, gguf::ValueType::STRING) << key;
  EXPECT_EQ(x->str, v) << key;
}

// The first n floats of an F32 tensor, read from the file.
std::vector<float> read_f32(const std::string& path, const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  EXPECT_EQ(t->type, Type::F32) << name;
  const std::vector<uint8_t> bytes = les::test::read_bytes(path);
  const uint64_t at = f.data_offset + t->offset;
  EXPECT_LE(at + t->n_bytes, bytes.size()) << name;
  std::vector<float> v(static_cast<size_t>(t->n_elements()));
  std::memcpy(v.data(), bytes.data() + at, v.size() * sizeof(float));
  return v;
}

void mean_sd(const std::vector<float>& v, double* mean, double* sd) {
  double s = 0, s2 = 0;
  for (float x : v) s += x;
  *mean = s / static_cast<double>(v.size());
  for (float x : v) s2 += (x - *mean) * (x - *mean);
  *sd = std::sqrt(s2 / static_cast<double>(v.size()));
}

// FNV-1a over each token, token type (decimal) and merge, each followed by a NUL.
uint64_t vocab_hash(const SynthVocab& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&](const std::string& s) {
    for (char c : s) {
      h ^= static_cast<uint8_t>(c);
      h *= 0x100000001b3ull;
    }
    h *= 0x100000001b3ull;  // the NUL separator (h ^= 0)
  };
  for (const auto& t : v.tokens) add(t);
  for (int32_t t : v.token_types) add(std::to_string(t));
  for (const auto& m : v.merges) add(m);
  return h;
}

}  // namespace

TEST(SynthMmproj, EveryKeyAndTensorForBothMergesAndEveryType) {
  for (int n_merge : {2, 4}) {
    for (const char* type : {"f32", "f16", "q8_0"}) {
      SCOPED_TRACE(std::string("n_merge ") + std::to_string(n_merge) + ", " + type);
      MmprojSpec s = mmproj_shape_spec("tiny");
      s.n_merge = n_merge;
      s.type = type;
      const std::string p = tmp_path(std::string("mmproj-") + std::to_string(n_merge) + "-" + type + ".gguf");
      write_synth_mmproj(s, p);
      const gguf::File f = gguf::read_file(p);
      EXPECT_EQ(f.file_size, mmproj_file_bytes(s));

      expect_string(f, "general.architecture", "clip");
      expect_string(f, "general.type", "mmproj");
      expect_string(f, "general.name", "synth-mmproj-tiny");
      expect_u32(f, "general.file_type", std::string(type) == "f32" ? 0 : std::string(type) == "f16" ? 1 : 7);
      expect_string(f, "clip.projector_type", "minicpmv4_6");
      expect_bool(f, "clip.has_vision_encoder", true);
      expect_bool(f, "clip.use_gelu", true);
      expect_u32(f, "clip.vision.image_size", 112);
      expect_u32(f, "clip.vision.patch_size", 14);
      expect_u32(f, "clip.vision.embedding_length", 64);
      expect_u32(f, "clip.vision.feed_forward_length", 128);
      expect_u32(f, "clip.vision.block_count", 4);
      expect_u32(f, "clip.vision.attention.head_count", 4);
      expect_u32(f, "clip.vision.projection_dim", 128);
      expect_u32(f, "clip.vision.projector.scale_factor", static_cast<uint64_t>(n_merge));
      const gguf::Value* eps = f.find("clip.vision.attention.layer_norm_epsilon");
      ASSERT_NE(eps, nullptr);
      EXPECT_EQ(eps->type, gguf::ValueType::FLOAT32);
      EXPECT_FLOAT_EQ(static_cast<float>(eps->f64), 1e-6f);
      for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
        const gguf::Value* a = f.find(key);
        ASSERT_NE(a, nullptr) << key;
        ASSERT_EQ(a->type, gguf::ValueType::ARRAY);
        EXPECT_EQ(a->elem_type, gguf::ValueType::FLOAT32);
        ASSERT_EQ(a->arr.size(), 3u);
        for (const auto& x : a->arr) EXPECT_FLOAT_EQ(static_cast<float>(x.f64), 0.5f);
      }
      const gguf::Value* wa = f.find("clip.vision.wa_layer_indexes");
      ASSERT_NE(wa, nullptr);
      ASSERT_EQ(wa->type, gguf::ValueType::ARRAY);
      EXPECT_EQ(wa->elem_type, gguf::ValueType::INT32);
      ASSERT_EQ(wa->arr.size(), 1u);
      EXPECT_EQ(wa->arr[0].i64, 1);
      EXPECT_EQ(f.kv.size(), 19u) << "no keys beyond the listed ones";

      const auto want = expected_tensors(s);
      EXPECT_EQ(f.tensors.size(), want.size());
      for (const auto& t : f.tensors) {
        auto it = want.find(t.name);
        if (it == want.end()) {
          ADD_FAILURE() << "unexpected tensor " << t.name;
          continue;
        }
        EXPECT_EQ(t.ne, it->second.ne) << t.name;
        EXPECT_EQ(t.type, it->second.type) << t.name << ": " << type_name(t.type);
      }
      for (const auto& [name, e] : want) EXPECT_NE(f.find_tensor(name), nullptr) << "missing " << name;
      EXPECT_EQ(f.find_tensor("v.vit_merger.ds_ffn_up.weight") != nullptr, n_merge == 4);
      // clip.cpp swaps ffn_up and ffn_down when ffn_down's ne[0] is n_embd: it must be n_ff.
      EXPECT_EQ(f.find_tensor("v.blk.0.ffn_down.weight")->ne[0], 128);

      // Values: layer-norm weights near 1, position embeddings small, all finite.
      double mean = 0, sd = 0;
      mean_sd(read_f32(p, f, "mm.input_norm.weight"), &mean, &sd);
      EXPECT_NEAR(mean, 1.0, 0.02);
      EXPECT_NEAR(sd, 0.05, 0.01);
      const std::vector<float> pos = read_f32(p, f, "v.position_embd.weight");
      for (float x : pos) ASSERT_TRUE(std::isfinite(x));
      mean_sd(pos, &mean, &sd);
      EXPECT_NEAR(mean, 0.0, 0.005);
      EXPECT_NEAR(sd, 0.05, 0.005);
      std::remove(p.c_str());
    }
  }
}

TEST(SynthMmproj, Q8RowsThatDoNotFillBlocksFallBackToF16) {
  // As llama.cpp's converter does for SigLIP's n_ff = 4304: ffn_down (rows of n_ff) F16, the rest q8_0.
  MmprojSpec s = mmproj_shape_spec("tiny");
  s.type = "q8_0";
  s.n_ff = 80;
  const std::string p = tmp_path("mmproj-q8-ff80.gguf");
  write_synth_mmproj(s, p);
  const gguf::File f = gguf::read_file(p);
  EXPECT_EQ(f.find_tensor("v.blk.0.ffn_down.weight")->type, Type::F16);
  EXPECT_EQ(f.find_tensor("v.blk.0.ffn_up.weight")->type, Type::Q8_0);
  EXPECT_EQ(f.find_tensor("v.blk.0.attn_q.weight")->type, Type::Q8_0);
  EXPECT_EQ(f.find_tensor("mm.up.weight")->type, Type::Q8_0);
  EXPECT_EQ(f.find_tensor("v.patch_embd.weight")->type, Type::F16);
  const auto want = expected_tensors(s);
  for (const auto& t : f.tensors) {
    const auto it = want.find(t.name);
    ASSERT_NE(it, want.end()) << t.name;
    EXPECT_EQ(t.type, it->second.type) << t.name;
  }
  std::remove(p.c_str());
}

TEST(SynthMmproj, Siglip400mShape) {
  // The MiniCPM-V 4.6 encoder's dimensions (the struct's defaults): 27 layers of 1152, ~400M
  // parameters in the ViT, plus the two mergers.
  const MmprojSpec big = mmproj_shape_spec("siglip-400m");
  EXPECT_EQ(big.n_embd, 1152);
  EXPECT_EQ(big.n_ff, 4304);
  EXPECT_EQ(big.n_layer, 27);
  EXPECT_EQ(big.n_head, 16);
  EXPECT_EQ(big.image_size, 448);
  EXPECT_EQ(big.insert_layer_id, 6);
  EXPECT_EQ(big.text_embd, 2048);
  EXPECT_EQ(error_of([&] { validate(big); }), "");
  const MmprojSpec def;
  EXPECT_EQ(def.n_embd, big.n_embd);
  EXPECT_EQ(def.n_layer, big.n_layer);
  const double mib_f16 = static_cast<double>(mmproj_file_bytes(big)) / (1 << 20);
  EXPECT_GT(mib_f16, 900.0);
  EXPECT_LT(mib_f16, 960.0);
  MmprojSpec q8 = big;
  q8.type = "q8_0";
  const double mib_q8 = static_cast<double>(mmproj_file_bytes(q8)) / (1 << 20);
  EXPECT_GT(mib_q8, 600.0);
  EXPECT_LT(mib_q8, 650.0);
  const MmprojSpec tiny = mmproj_shape_spec("tiny");
  EXPECT_EQ(tiny.text_embd, shape_spec("tiny").n_embd) << "the tiny mmproj feeds les synth's tiny text shape";
}

TEST(SynthMmproj, SameSpecSameBytes) {
  MmprojSpec s = mmproj_shape_spec("tiny");
  s.type = "q8_0";
  const std::string a = tmp_path("mmproj-det-a.gguf"), b = tmp_path("mmproj-det-b.gguf"),
                    c = tmp_path("mmproj-det-c.gguf");
  write_synth_mmproj(s, a);
  write_synth_mmproj(s, b);
  s.seed = 2;
  write_synth_mmproj(s, c);
  const auto ba = les::test::read_bytes(a), bb = les::test::read_bytes(b), bc = les::test::read_bytes(c);
  ASSERT_FALSE(ba.empty());
  EXPECT_TRUE(ba == bb) << "same spec, different bytes";
  ASSERT_EQ(ba.size(), bc.size());
  EXPECT_FALSE(ba == bc) << "different seeds gave the same file";
  for (const auto& p : {a, b, c}) std::remove(p.c_str());
}

TEST(SynthMmproj, BadSpecsNameTheField) {
  auto bad = [](auto edit) {
    MmprojSpec s = mmproj_shape_spec("tiny");
    edit(s);
    return error_of([&] { validate(s); });
  };
  auto has = [](const std::string& msg, const char* field) { return msg.find(field) != std::string::npos; };
  EXPECT_EQ(bad([](MmprojSpec&) {}), "");
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.n_merge = 3; }), "n_merge = 3"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.insert_layer_id = 4; }), "insert_layer_id = 4"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.insert_layer_id = -1; }), "insert_layer_id"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.n_head = 5; }), "n_head = 5"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.n_ff = 64; }), "n_ff = 64"));  // = n_embd: clip.cpp would swap
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.type = "q4_0"; }), "type"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) {
                    s.type = "q8_0";
                    s.n_embd = 48;
                    s.n_head = 4;
                  }),
                  "n_embd = 48"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.n_pos_side = 64; }), "n_pos_side"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.image_size = 100; }), "image_size"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.text_embd = 0; }), "text_embd"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.n_ff_merger = -1; }), "n_ff_merger"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.n_layer = 0; }), "n_layer"));
  EXPECT_TRUE(has(bad([](MmprojSpec& s) { s.eps = 0; }), "eps"));
  const std::string unknown = error_of([] { mmproj_shape_spec("vit-huge"); });
  EXPECT_TRUE(has(unknown, "vit-huge"));
  EXPECT_TRUE(has(unknown, "tiny") && has(unknown, "siglip-400m")) << unknown;
  MmprojSpec s = mmproj_shape_spec("tiny");
  s.n_merge = 3;
  EXPECT_THROW(write_synth_mmproj(s, tmp_path("never-mmproj.gguf")), les::Error);
  EXPECT_FALSE(les::test::file_exists(tmp_path("never-mmproj.gguf")));
}

TEST(SynthMmprojVocab, DefaultVocabularyUnchanged) {
  // Hashes of the vocabularies as written before image tokens existed.
  EXPECT_EQ(vocab_hash(make_synth_vocab(512)), 0x7b2de229c0adadbfull);
  EXPECT_EQ(vocab_hash(make_synth_vocab(300)), 0x13ed17e6ac1ca74bull);
  EXPECT_EQ(vocab_hash(make_synth_vocab(512, false)), 0x7b2de229c0adadbfull);
  EXPECT_NE(vocab_hash(make_synth_vocab(512, true)), 0x7b2de229c0adadbfull);
}

TEST(SynthMmprojVocab, ImageTokensAreSingleControlTokens) {
  for (int n_vocab : {263, 300, 512}) {
    SCOPED_TRACE(n_vocab);
    const SynthVocab v = make_synth_vocab(n_vocab, true), plain = make_synth_vocab(n_vocab);
    ASSERT_EQ(static_cast<int>(v.tokens.size()), n_vocab);
    ASSERT_EQ(v.token_types.size(), v.tokens.size());
    EXPECT_EQ(v.eos_id, plain.eos_id);
    const char* markers[] = {"<image>", "</image>", "<slice>", "</slice>"};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(v.tokens[static_cast<size_t>(n_vocab - 7 + i)], markers[i]);
      EXPECT_EQ(v.token_types[static_cast<size_t>(n_vocab - 7 + i)], 3);
    }
    for (int i = 0; i < 3; ++i) {  // the last three control tokens keep their ids
      EXPECT_EQ(v.tokens[static_cast<size_t>(n_vocab - 3 + i)], plain.tokens[static_cast<size_t>(n_vocab - 3 + i)]);
    }
    // Byte tokens and merges as before, four fewer merges or fillers.
    for (int i = 0; i < 256 + static_cast<int>(v.merges.size()); ++i) {
      EXPECT_EQ(v.tokens[static_cast<size_t>(i)], plain.tokens[static_cast<size_t>(i)]);
    }
  }
  EXPECT_NE(error_of([] { make_synth_vocab(262, true); }).find("262"), std::string::npos);
  SynthSpec bad = shape_spec("tiny");
  bad.n_vocab = 260;
  bad.image_tokens = true;
  EXPECT_NE(error_of([&] { validate(bad); }).find("vocab = 260"), std::string::npos);
}

TEST(SynthMmprojVocab, TokenizerMapsImageMarkersToOneId) {
  for (const char* shape : {"tiny", "qwen35-tiny"}) {
    SCOPED_TRACE(shape);
    SynthSpec s = shape_spec(shape);
    s.image_tokens = true;
    const std::string p = tmp_path(std::string("text-image-tokens-") + shape + ".gguf");
    write_synth_model(s, p);
    const gguf::File f = gguf::read_file(p);
    EXPECT_EQ(f.file_size, synth_file_bytes(s));
    const Tokenizer tok(vocab_from_gguf(f));
    const int32_t n = s.n_vocab;
    const char* markers[] = {"<image>", "</image>", "<slice>", "</slice>"};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(tok.find_token(markers[i]), n - 7 + i);
      EXPECT_TRUE(tok.is_control(n - 7 + i));
      EXPECT_EQ(tok.encode(markers[i], false, true), std::vector<int32_t>{n - 7 + i}) << markers[i];
      EXPECT_GT(tok.encode(markers[i], false, false).size(), 1u) << "plain text without parse_special";
      EXPECT_EQ(tok.token_to_piece(n - 7 + i, true), markers[i]);
      EXPECT_FALSE(tok.is_eog(n - 7 + i));
    }
    // MiniCPM-V's slice layout, as mtmd writes it around image embeddings.
    const auto ids = tok.encode("<image></image><slice></slice>\n<slice></slice>", false, true);
    EXPECT_EQ(ids, (std::vector<int32_t>{n - 7, n - 6, n - 5, n - 4, 10, n - 5, n - 4}));
    EXPECT_EQ(tok.eos(), n - 3);
    EXPECT_EQ(tok.find_token("<|im_start|>"), n - 2);
    std::remove(p.c_str());
  }
}
