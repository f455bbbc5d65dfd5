// Writing a random-weight minicpmv4_6 mmproj: llama.cpp's "clip" keys and tensors (names and
// shapes as its converter writes them and tools/mtmd/clip.cpp loads them), every tensor generated
// directly in its storage type from (seed, name, row).
//
// Scales (E = n_embd, F = a hidden width, L = n_layer), chosen so that the encoder's activations
// stay O(1) through all layers with every nonlinearity in its curved range:
//  - patch_embd ~ N(0, 1/sqrt(3 p^2)): a patch of normalized pixels (|x| <= 1) embeds with rms
//    about its pixels' rms; patch bias ~ N(0, 0.02); position embeddings ~ N(0, 0.05).
//  - Every LayerNorm weight ~ 1 + N(0, 0.05), bias ~ N(0, 0.02): the normalized rows have rms ~1.
//  - Projections reading a normalized row: N(0, 1/sqrt(fan_in)) (unit-variance outputs); q and k
//    carry a gain of 1.25, so the attention logits have std ~1.5 (softmax neither uniform nor
//    one-hot). The FFN and merger up projections get biases ~ N(0, 0.1), so the gelu (tanh) and
//    erf-gelu inputs are ~N(0.1-ish, 1): both halves of the curve are used.
//  - Projections writing into the residual stream (attn_out, ffn_down, the ViT merger's attn_out
//    and ds_ffn_down) are scaled by 1/sqrt(2 L + 2) as in GPT-2's initialization: each of the
//    2 L + 2 branches adds a variance of at most ~0.5 / (2 L + 2), so the stream's rms stays near
//    that of the patch embedding (~1) at every depth while each layer still moves it by ~10%.
//  - The final merger's mm.down ~ N(0, 1/sqrt(fan_in)), biases ~ N(0, 0.02): the embeddings handed
//    to the text model have rms ~0.65 (that of gelu of a unit normal).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/quant/types.h"
#include "les/synth/mmproj_spec.h"
#include "les/synth/random_fill.h"
#include "les/util/error.h"

namespace les::synth {

namespace {

struct NamedMmproj {
  const char* name;
  int n_embd, n_ff, n_layer, n_head, patch_size, image_size, n_merge, insert_layer_id, text_embd;
};

const NamedMmproj kMmprojShapes[] = {
    {"tiny", 64, 128, 4, 4, 14, 112, 4, 1, 128},
    {"siglip-400m", 1152, 4304, 27, 16, 14, 448, 4, 6, 2048},
};

uint64_t mmproj_align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

Type weight_type(const std::string& t) {
  if (t == "f32") return Type::F32;
  if (t == "f16") return Type::F16;
  if (t == "q8_0") return Type::Q8_0;
  throw Error(strfmt("synth mmproj: type = '%s' must be f32, f16 or q8_0", t.c_str()));
}

// llama.cpp's general.file_type of the converter's output type.
uint32_t file_type(Type t) { return t == Type::F32 ? 0 : t == Type::F16 ? 1 : 7; }

class MmprojBuilder {
 public:
  explicit MmprojBuilder(const MmprojSpec& s) : s_(s), wt_(weight_type(s.type)) {}

  gguf::Writer build() {
    add_keys();
    const int64_t E = s_.n_embd, F = s_.n_ff, P = s_.patch_size;
    const float branch = 1.0f / std::sqrt(static_cast<float>(2 * s_.n_layer + 2));
    tensor("v.patch_embd.weight", {P, P, 3, E}, wt_ == Type::F32 ? Type::F32 : Type::F16, inv_sqrt(3 * P * P));
    vec("v.patch_embd.bias", E, 0.02f);
    tensor("v.position_embd.weight", {E, static_cast<int64_t>(s_.n_pos_side) * s_.n_pos_side}, Type::F32, 0.05f);
    for (int il = 0; il < s_.n_layer; ++il) {
      const std::string b = "v.blk." + std::to_string(il) + ".";
      layer_norm(b + "ln1", E);
      attention(b + "attn_", E, branch);
      layer_norm(b + "ln2", E);
      // ffn_down's ne[0] is n_ff (validate() refuses n_ff = n_embd): clip.cpp swaps up and down
      // when ffn_down.weight's ne[0] equals n_embd (old converters' layout).
      matrix(b + "ffn_up.weight", {E, F}, inv_sqrt(E));
      vec(b + "ffn_up.bias", F, 0.1f);
      matrix(b + "ffn_down.weight", {F, E}, branch * inv_sqrt(F));
      vec(b + "ffn_down.bias", E, 0.02f);
    }
    layer_norm("v.post_ln", E);
    if (s_.n_merge == 4) {
      const int64_t FV = mmproj_ff_vit_merger(s_);
      layer_norm("v.vit_merger.ln1", E);
      attention("v.vit_merger.attn_", E, branch);
      layer_norm("v.vit_merger.ds_ln", 4 * E);
      matrix("v.vit_merger.ds_ffn_up.weight", {4 * E, FV}, inv_sqrt(4 * E));
      vec("v.vit_merger.ds_ffn_up.bias", FV, 0.1f);
      matrix("v.vit_merger.ds_ffn_down.weight", {FV, E}, branch * inv_sqrt(FV));
      vec("v.vit_merger.ds_ffn_down.bias", E, 0.02f);
    }
    const int64_t FM = mmproj_ff_merger(s_), T = s_.text_embd;
    vec("mm.input_norm.weight", 4 * E, 0.05f, 1.0f);
    vec("mm.input_norm.bias", 4 * E, 0.02f);
    matrix("mm.up.weight", {4 * E, FM}, inv_sqrt(4 * E));
    vec("mm.up.bias", FM, 0.1f);
    matrix("mm.down.weight", {FM, T}, inv_sqrt(FM));
    vec("mm.down.bias", T, 0.02f);
    return std::move(w_);
  }

  uint64_t data_bytes() const { return data_bytes_; }

 private:
  static float inv_sqrt(int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); }

  void add_keys() {
    w_.add_string("general.architecture", "clip");
    w_.add_string("general.type", "mmproj");
    w_.add_string("general.name", s_.name);
    w_.add_u32("general.file_type", file_type(wt_));
    w_.add_string("clip.projector_type", "minicpmv4_6");
    w_.add_bool("clip.has_vision_encoder", true);
    w_.add_bool("clip.use_gelu", true);
    w_.add_u32("clip.vision.projection_dim", static_cast<uint32_t>(s_.text_embd));
    w_.add_u32("clip.vision.image_size", static_cast<uint32_t>(s_.image_size));
    w_.add_u32("clip.vision.patch_size", static_cast<uint32_t>(s_.patch_size));
    w_.add_u32("clip.vision.embedding_length", static_cast<uint32_t>(s_.n_embd));
    w_.add_u32("clip.vision.feed_forward_length", static_cast<uint32_t>(s_.n_ff));
    w_.add_u32("clip.vision.block_count", static_cast<uint32_t>(s_.n_layer));
    w_.add_u32("clip.vision.attention.head_count", static_cast<uint32_t>(s_.n_head));
    w_.add_f32_array("clip.vision.image_mean", {0.5f, 0.5f, 0.5f});
    w_.add_f32_array("clip.vision.image_std", {0.5f, 0.5f, 0.5f});
    w_.add_u32("clip.vision.projector.scale_factor", static_cast<uint32_t>(s_.n_merge));
    w_.add_i32_array("clip.vision.wa_layer_indexes", {s_.insert_layer_id});
    w_.add_f32("clip.vision.attention.layer_norm_epsilon", s_.eps);
  }

  // Self-attention projections of width E: prefix + {q,k,v,out}.{weight,bias}.
  void attention(const std::string& prefix, int64_t E, float branch) {
    matrix(prefix + "q.weight", {E, E}, 1.25f * inv_sqrt(E));
    vec(prefix + "q.bias", E, 0.02f);
    matrix(prefix + "k.weight", {E, E}, 1.25f * inv_sqrt(E));
    vec(prefix + "k.bias", E, 0.02f);
    matrix(prefix + "v.weight", {E, E}, inv_sqrt(E));
    vec(prefix + "v.bias", E, 0.02f);
    matrix(prefix + "out.weight", {E, E}, branch * inv_sqrt(E));
    vec(prefix + "out.bias", E, 0.02f);
  }

  void layer_norm(const std::string& prefix, int64_t n) {
    vec(prefix + ".weight", n, 0.05f, 1.0f);
    vec(prefix + ".bias", n, 0.02f);
  }

  // A 2-D weight matrix in the spec's type (F16 for a q8_0 matrix whose rows do not fill blocks).
  void matrix(const std::string& name, std::vector<int64_t> ne, float sigma) {
    Type t = wt_;
    if (ne[0] % block_size(t) != 0) t = Type::F16;
    tensor(name, std::move(ne), t, sigma);
  }

  // An F32 vector: offset + N(0, sigma).
  void vec(const std::string& name, int64_t n, float sigma, float offset = 0.0f) {
    tensor(name, {n}, Type::F32, sigma, offset);
  }

  void tensor(const std::string& name, std::vector<int64_t> ne, Type t, float sigma, float offset = 0.0f) {
    const int64_t row_len = ne[0];
    int64_t n_rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) n_rows *= ne[i];
    const size_t rb = row_bytes(t, row_len);
    data_bytes_ += mmproj_align_up(rb * static_cast<uint64_t>(n_rows), 32);
    const uint64_t key = tensor_key(s_.seed, name);
    w_.add_tensor(name, std::move(ne), t, gguf::Writer::FillFn([=](void* dst, uint64_t n_bytes) {
      LES_ASSERT(n_bytes == rb * static_cast<uint64_t>(n_rows));
      auto* out = static_cast<uint8_t*>(dst);
      for (int64_t r = 0; r < n_rows; ++r) {
        uint8_t* row = out + static_cast<size_t>(r) * rb;
        fill_random_row(t, sigma, key, r, row_len, row);
        if (offset != 0.0f) {
          LES_ASSERT(t == Type::F32);
          auto* f = reinterpret_cast<float*>(row);
          for (int64_t i = 0; i < row_len; ++i) f[i] += offset;
        }
      }
    }));
  }

  const MmprojSpec& s_;
  Type wt_;
  gguf::Writer w_;
  uint64_t data_bytes_ = 0;
};

}  // namespace

std::vector<std::string> mmproj_shape_names() {
  std::vector<std::string> v;
  for (const auto& s : kMmprojShapes) v.emplace_back(s.name);
  return v;
}

MmprojSpec mmproj_shape_spec(const std::string& shape) {
  for (const auto& n : kMmprojShapes) {
    if (shape != n.name) continue;
    MmprojSpec s;
    s.n_embd = n.n_embd;
    s.n_ff = n.n_ff;
    s.n_layer = n.n_layer;
    s.n_head = n.n_head;
    s.patch_size = n.patch_size;
    s.image_size = n.image_size;
    s.n_merge = n.n_merge;
    s.insert_layer_id = n.insert_layer_id;
    s.text_embd = n.text_embd;
    s.name = std::string("synth-mmproj-") + n.name;
    return s;
  }
  std::string names;
  for (const auto& n : mmproj_shape_names()) names += (names.empty() ? "" : ", ") + n;
  throw Error(strfmt("synth mmproj: unknown shape '%s' (known: %s)", shape.c_str(), names.c_str()));
}

int mmproj_ff_vit_merger(const MmprojSpec& s) { return s.n_ff_vit_merger > 0 ? s.n_ff_vit_merger : 4 * s.n_embd; }
int mmproj_ff_merger(const MmprojSpec& s) { return s.n_ff_merger > 0 ? s.n_ff_merger : 4 * s.n_embd; }

void validate(const MmprojSpec& s) {
  auto fail = [](const std::string& msg) { throw Error("synth mmproj: " + msg); };
  const Type t = weight_type(s.type);
  if (s.n_embd < 8 || s.n_embd > 65536) fail(strfmt("n_embd = %d must be in [8, 65536]", s.n_embd));
  if (s.n_head < 1 || s.n_embd % s.n_head != 0) {
    fail(strfmt("n_head = %d must be >= 1 and divide n_embd = %d", s.n_head, s.n_embd));
  }
  if (s.n_ff < 1) fail(strfmt("n_ff = %d must be >= 1", s.n_ff));
  if (s.n_ff == s.n_embd) {
    fail(strfmt("n_ff = %d must differ from n_embd (clip.cpp swaps ffn_up and ffn_down when ffn_down's rows are "
                "n_embd long)", s.n_ff));
  }
  if (s.n_layer < 1 || s.n_layer > 1024) fail(strfmt("n_layer = %d must be in [1, 1024]", s.n_layer));
  if (s.patch_size < 1) fail(strfmt("patch_size = %d must be >= 1", s.patch_size));
  if (s.n_merge != 2 && s.n_merge != 4) fail(strfmt("n_merge = %d must be 2 or 4", s.n_merge));
  if (s.image_size < 1 || s.image_size % (s.patch_size * s.n_merge) != 0) {
    fail(strfmt("image_size = %d must be a positive multiple of patch_size x n_merge = %d", s.image_size,
                s.patch_size * s.n_merge));
  }
  if (s.n_pos_side != 70) {
    fail(strfmt("n_pos_side = %d must be 70 (clip.cpp's minicpmv4_6 graph indexes a 70 x 70 position bucket grid)",
                s.n_pos_side));
  }
  if (s.insert_layer_id < 0 || s.insert_layer_id >= s.n_layer) {
    fail(strfmt("insert_layer_id = %d must be in [0, n_layer = %d)", s.insert_layer_id, s.n_layer));
  }
  if (s.n_ff_vit_merger < 0) fail(strfmt("n_ff_vit_merger = %d must be >= 0 (0: 4 x n_embd)", s.n_ff_vit_merger));
  if (s.n_ff_merger < 0) fail(strfmt("n_ff_merger = %d must be >= 0 (0: 4 x n_embd)", s.n_ff_merger));
  if (s.text_embd < 1) fail(strfmt("text_embd = %d must be >= 1", s.text_embd));
  if (!(s.eps > 0.0f && s.eps < 1.0f)) fail(strfmt("eps = %g must be in (0, 1)", s.eps));
  // q8_0: matrices whose rows fill whole blocks are q8_0, the others fall back to F16 as in
  // llama.cpp's converter (n_ff = 4304 rows of ffn_down). Rows of n_embd (attention, ffn_up, and
  // 4 n_embd for the mergers) must fill blocks, or hardly anything would be q8_0.
  if (t == Type::Q8_0 && s.n_embd % 32 != 0) fail(strfmt("n_embd = %d must be a multiple of 32 for q8_0", s.n_embd));
}

uint64_t mmproj_file_bytes(const MmprojSpec& spec) {
  validate(spec);
  MmprojBuilder b(spec);
  const gguf::Writer w = b.build();
  return w.header_bytes() + b.data_bytes();
}

void write_synth_mmproj(const MmprojSpec& spec, const std::string& path) {
  validate(spec);
  MmprojBuilder b(spec);
  const gguf::Writer w = b.build();
  w.write(path);
}

}  // namespace les::synth
