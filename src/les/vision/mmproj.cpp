#include "les/vision/mmproj.h"

#include <cmath>
#include <cstring>

#include "les/quant/kernels.h"
#include "les/quant/types.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les::vision {

PreprocessParams MmprojConfig::preprocess(int merge) const {
  PreprocessParams p;
  p.image_size = image_size;
  p.patch_size = patch_size;
  p.n_merge = merge;
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = mean[c];
    p.std[c] = std[c];
  }
  return p;
}

namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

// Reads the keys and tensors of one file into an Mmproj (a friend, so it fills the private parts).
class MmprojLoader {
 public:
  explicit MmprojLoader(Mmproj& m) : m_(m), f_(m.gguf_) {}

  void run() {
    read_config();
    read_weights();
    check_all_used();
  }

 private:
  Mmproj& m_;
  const gguf::File& f_;
  std::vector<std::string> used_;

  [[noreturn]] void fail(const std::string& what) const { throw Error(m_.path_ + ": " + what); }

  int64_t need_int(const char* key) const {
    const gguf::Value* v = f_.find(key);
    if (!v) fail(strfmt("missing key '%s' (required for projector type minicpmv4_6)", key));
    return v->as_int(key);
  }
  int positive(const char* key, int64_t max = 1 << 20) const {
    const int64_t v = need_int(key);
    if (v <= 0 || v > max) fail(strfmt("key '%s' = %lld is out of range (1..%lld)", key, static_cast<long long>(v),
                                        static_cast<long long>(max)));
    return static_cast<int>(v);
  }

  void read_config() {
    MmprojConfig& c = m_.cfg_;
    const std::string arch = f_.get_string("general.architecture");
    if (arch != "clip") {
      fail(strfmt("general.architecture is '%s': not a multimodal projector (mmproj) file; expected 'clip'",
                  arch.c_str()));
    }
    std::string proj = f_.get_string("clip.projector_type");
    if (proj.empty()) proj = f_.get_string("clip.vision.projector_type");
    if (proj.empty()) fail("missing key 'clip.projector_type'");
    if (proj != "minicpmv4_6") {
      fail(strfmt("projector type '%s' is not supported: les runs the MiniCPM-V 4.6/4.7 encoder (projector type "
                  "'minicpmv4_6') only",
                  proj.c_str()));
    }
    if (!f_.get_bool("clip.has_vision_encoder", false)) fail("clip.has_vision_encoder is not true: no vision encoder");
    c.n_embd = positive("clip.vision.embedding_length");
    c.n_ff = positive("clip.vision.feed_forward_length");
    c.n_layer = positive("clip.vision.block_count", 1024);
    c.n_head = positive("clip.vision.attention.head_count", 1024);
    c.patch_size = positive("clip.vision.patch_size", 1024);
    c.image_size = positive("clip.vision.image_size", 1 << 16);
    if (const gguf::Value* hk = f_.find("clip.vision.attention.head_count_kv"); hk && hk->as_int("head_count_kv") != c.n_head) {
      fail("clip.vision.attention.head_count_kv differs from head_count: grouped-query attention is not part of "
           "this encoder");
    }
    if (c.n_embd % c.n_head != 0) {
      fail(strfmt("clip.vision.embedding_length %d is not a multiple of the head count %d", c.n_embd, c.n_head));
    }
    c.head_dim = c.n_embd / c.n_head;
    if (const gguf::Value* hd = f_.find("clip.vision.attention.head_dim"); hd && hd->as_int("head_dim") != c.head_dim) {
      fail(strfmt("clip.vision.attention.head_dim %lld != embedding_length / head_count = %d",
                  static_cast<long long>(hd->as_int("head_dim")), c.head_dim));
    }
    const gguf::Value* eps = f_.find("clip.vision.attention.layer_norm_epsilon");
    if (!eps) fail("missing key 'clip.vision.attention.layer_norm_epsilon'");
    c.eps = static_cast<float>(eps->as_float("layer_norm_epsilon"));
    if (!(c.eps > 0) || c.eps > 0.1f) fail(strfmt("layer_norm_epsilon %g is out of range", double(c.eps)));
    const bool gelu = f_.get_bool("clip.use_gelu", false);
    if (f_.get_bool("clip.use_silu", false)) fail("clip.use_silu is set: this encoder's FFN is GELU");
    c.gelu = gelu;
    c.n_merge = static_cast<int>(f_.get_int("clip.vision.projector.scale_factor", 4));
    if (c.n_merge != 2 && c.n_merge != 4) {
      fail(strfmt("clip.vision.projector.scale_factor is %d; minicpmv4_6 takes 2 (4x) or 4 (16x)", c.n_merge));
    }
    for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
      const gguf::Value* v = f_.find(key);
      if (!v) fail(strfmt("missing key '%s'", key));
      if (v->type != gguf::ValueType::ARRAY || v->arr.size() < 3) fail(strfmt("key '%s' must be an array of 3 floats", key));
      for (int i = 0; i < 3; ++i) {
        const float x = static_cast<float>(v->arr[static_cast<size_t>(i)].as_float(key));
        if (!std::isfinite(x)) fail(strfmt("key '%s' holds a non-finite value", key));
        (std::strcmp(key, "clip.vision.image_mean") == 0 ? c.mean : c.std)[i] = x;
      }
    }
    for (int i = 0; i < 3; ++i) {
      if (!(c.std[i] > 0)) fail("clip.vision.image_std must be positive");
    }
    if (const gguf::Value* v = f_.find("clip.vision.wa_layer_indexes")) {
      if (v->type != gguf::ValueType::ARRAY || v->arr.empty()) fail("clip.vision.wa_layer_indexes must be a non-empty array");
      const int64_t id = v->arr[0].as_int("clip.vision.wa_layer_indexes");
      if (id < 0 || id >= c.n_layer) {
        fail(strfmt("clip.vision.wa_layer_indexes[0] = %lld (the ViT merger's layer) is out of range (n_layer %d)",
                    static_cast<long long>(id), c.n_layer));
      }
      c.insert_layer_id = static_cast<int>(id);
    }
  }

  const gguf::TensorInfo* find(const std::string& name, std::vector<int64_t> want, bool required) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (required) fail(strfmt("missing tensor '%s' %s", name.c_str(), shape_str(want).c_str()));
      return nullptr;
    }
    std::vector<int64_t> have = t->ne;
    while (have.size() > 1 && have.back() == 1) have.pop_back();
    while (want.size() > 1 && want.back() == 1) want.pop_back();
    if (have != want) {
      fail(strfmt("tensor '%s' has shape %s, expected %s", name.c_str(), shape_str(t->ne).c_str(),
                  shape_str(want).c_str()));
    }
    used_.push_back(name);
    return t;
  }
  const uint8_t* data(const gguf::TensorInfo* t) const { return m_.file_.data() + f_.data_offset + t->offset; }

  Matrix matrix(const std::string& name, int64_t n_in, int64_t n_out, bool required = true) {
    const gguf::TensorInfo* t = find(name, {n_in, n_out}, required);
    if (!t) return {};
    if (t->type != Type::F32 && t->type != Type::F16 && t->type != Type::BF16 && !info(t->type).weight_type) {
      fail(strfmt("tensor '%s' has type %s, which is not a weight type", name.c_str(), type_name(t->type)));
    }
    act_type(t->type);  // throws for a type without a product kernel
    return Matrix{t->type, n_in, n_out, row_bytes(t->type, n_in), data(t)};
  }

  // Whole tensor as F32 (any type with a dequantizer).
  std::vector<float> floats(const gguf::TensorInfo* t, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    if (t->type == Type::F32) {
      std::memcpy(out.data(), data(t), static_cast<size_t>(n) * 4);
    } else {
      const int64_t row = t->ne[0];
      for (int64_t r = 0; r < n / row; ++r) {
        dequantize_row(t->type, data(t) + static_cast<size_t>(r) * row_bytes(t->type, row), out.data() + r * row, row);
      }
    }
    for (float x : out) {
      if (!std::isfinite(x)) fail(strfmt("tensor '%s' holds a non-finite value", t->name.c_str()));
    }
    return out;
  }

  Vec vec(const std::string& name, int64_t n, bool required = true) {
    const gguf::TensorInfo* t = find(name, {n}, required);
    if (!t) return {};
    if (t->type == Type::F32) {
      const auto* p = reinterpret_cast<const float*>(data(t));
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(p[i])) fail(strfmt("tensor '%s' holds a non-finite value", name.c_str()));
      }
      return Vec{p, n};
    }
    m_.owned_.push_back(floats(t, n));
    return Vec{m_.owned_.back().data(), n};
  }

  // The width of a tensor's dimension d, for widths the file decides (hidden sizes of the mergers).
  int64_t dim(const std::string& name, int d) const {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) fail(strfmt("missing tensor '%s'", name.c_str()));
    if (static_cast<int>(t->ne.size()) <= d || t->ne[static_cast<size_t>(d)] <= 0 ||
        t->ne[static_cast<size_t>(d)] > (1 << 20)) {
      fail(strfmt("tensor '%s' has shape %s", name.c_str(), shape_str(t->ne).c_str()));
    }
    return t->ne[static_cast<size_t>(d)];
  }

  void read_weights() {
    MmprojConfig& c = m_.cfg_;
    MmprojWeights& w = m_.w_;
    const int64_t E = c.n_embd, P = c.patch_size;
    {
      const gguf::TensorInfo* t = find("v.patch_embd.weight", {P, P, 3, E}, true);
      if (t->type != Type::F32 && t->type != Type::F16) {
        fail(strfmt("tensor 'v.patch_embd.weight' has type %s; the patch embedding must be F16 or F32",
                    type_name(t->type)));
      }
      w.patch = Matrix{t->type, 3 * P * P, E, row_bytes(t->type, 3 * P * P), data(t)};
    }
    w.patch_b = vec("v.patch_embd.bias", E, false);
    {
      const gguf::TensorInfo* t = f_.find_tensor("v.position_embd.weight");
      if (!t) fail("missing tensor 'v.position_embd.weight'");
      const int64_t n_pos = t->ne.size() >= 2 ? t->ne[1] : 0;
      const auto side = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(n_pos))));
      if (n_pos <= 0 || side * side != n_pos) {
        fail(strfmt("tensor 'v.position_embd.weight' has shape %s: expected [%lld, side^2]", shape_str(t->ne).c_str(),
                    static_cast<long long>(E)));
      }
      find("v.position_embd.weight", {E, n_pos}, true);
      c.n_pos = static_cast<int>(n_pos);
      c.n_pos_side = static_cast<int>(side);
      w.pos = floats(t, E * n_pos);
    }
    w.pre_ln_w = vec("v.pre_ln.weight", E, false);
    w.pre_ln_b = vec("v.pre_ln.bias", E, false);
    w.layers.resize(static_cast<size_t>(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
      VitLayer& L = w.layers[static_cast<size_t>(il)];
      const std::string b = "v.blk." + std::to_string(il) + ".";
      L.ln1_w = vec(b + "ln1.weight", E);
      L.ln1_b = vec(b + "ln1.bias", E);
      L.ln2_w = vec(b + "ln2.weight", E);
      L.ln2_b = vec(b + "ln2.bias", E);
      L.q = matrix(b + "attn_q.weight", E, E);
      L.k = matrix(b + "attn_k.weight", E, E);
      L.v = matrix(b + "attn_v.weight", E, E);
      L.o = matrix(b + "attn_out.weight", E, E);
      L.q_b = vec(b + "attn_q.bias", E, false);
      L.k_b = vec(b + "attn_k.bias", E, false);
      L.v_b = vec(b + "attn_v.bias", E, false);
      L.o_b = vec(b + "attn_out.bias", E, false);
      // llama.cpp swaps up and down when ffn_down takes n_embd inputs (legacy conversions).
      std::string up = b + "ffn_up", down = b + "ffn_down";
      if (dim(down + ".weight", 0) == E && dim(up + ".weight", 0) != E) std::swap(up, down);
      L.ff_up = matrix(up + ".weight", E, c.n_ff);
      L.ff_down = matrix(down + ".weight", c.n_ff, E);
      L.ff_up_b = vec(up + ".bias", c.n_ff, false);
      L.ff_down_b = vec(down + ".bias", E, false);
    }
    w.post_ln_w = vec("v.post_ln.weight", E, false);
    w.post_ln_b = vec("v.post_ln.bias", E, false);

    if (f_.find_tensor("v.vit_merger.ds_ffn_up.weight")) {
      if (c.insert_layer_id < 0) fail("the file has ViT-merger tensors but no clip.vision.wa_layer_indexes (its layer)");
      c.n_ff_vit_merger = static_cast<int>(dim("v.vit_merger.ds_ffn_up.weight", 1));
      w.vm_ln1_w = vec("v.vit_merger.ln1.weight", E);
      w.vm_ln1_b = vec("v.vit_merger.ln1.bias", E);
      w.vm_q = matrix("v.vit_merger.attn_q.weight", E, E);
      w.vm_k = matrix("v.vit_merger.attn_k.weight", E, E);
      w.vm_v = matrix("v.vit_merger.attn_v.weight", E, E);
      w.vm_o = matrix("v.vit_merger.attn_out.weight", E, E);
      w.vm_q_b = vec("v.vit_merger.attn_q.bias", E, false);
      w.vm_k_b = vec("v.vit_merger.attn_k.bias", E, false);
      w.vm_v_b = vec("v.vit_merger.attn_v.bias", E, false);
      w.vm_o_b = vec("v.vit_merger.attn_out.bias", E, false);
      w.vm_ds_ln_w = vec("v.vit_merger.ds_ln.weight", 4 * E);
      w.vm_ds_ln_b = vec("v.vit_merger.ds_ln.bias", 4 * E);
      w.vm_ds_up = matrix("v.vit_merger.ds_ffn_up.weight", 4 * E, c.n_ff_vit_merger);
      w.vm_ds_up_b = vec("v.vit_merger.ds_ffn_up.bias", c.n_ff_vit_merger, false);
      w.vm_ds_down = matrix("v.vit_merger.ds_ffn_down.weight", c.n_ff_vit_merger, E);
      w.vm_ds_down_b = vec("v.vit_merger.ds_ffn_down.bias", E, false);
    } else if (c.n_merge == 4) {
      fail("scale factor 4 (16x) needs the ViT merger, but tensor 'v.vit_merger.ds_ffn_up.weight' is missing");
    }

    c.n_ff_merger = static_cast<int>(dim("mm.up.weight", 1));
    c.out_embd = static_cast<int>(dim("mm.down.weight", 1));
    w.mm_norm_w = vec("mm.input_norm.weight", 4 * E);
    w.mm_norm_b = vec("mm.input_norm.bias", 4 * E, false);
    w.mm_up = matrix("mm.up.weight", 4 * E, c.n_ff_merger);
    w.mm_up_b = vec("mm.up.bias", c.n_ff_merger, false);
    w.mm_down = matrix("mm.down.weight", c.n_ff_merger, c.out_embd);
    w.mm_down_b = vec("mm.down.bias", c.out_embd, false);
    if (const gguf::Value* pd = f_.find("clip.vision.projection_dim"); pd && pd->as_int("projection_dim") != c.out_embd) {
      fail(strfmt("clip.vision.projection_dim %lld differs from mm.down's output width %d",
                  static_cast<long long>(pd->as_int("projection_dim")), c.out_embd));
    }
  }

  // A tensor this encoder does not use means a different model: refuse rather than ignore it.
  void check_all_used() const {
    for (const gguf::TensorInfo& t : f_.tensors) {
      bool found = false;
      for (const std::string& u : used_) found = found || u == t.name;
      if (!found) fail(strfmt("unexpected tensor '%s' for projector type minicpmv4_6", t.name.c_str()));
    }
  }
};

std::unique_ptr<Mmproj> Mmproj::load(const std::string& path) {
  auto m = std::unique_ptr<Mmproj>(new Mmproj());
  m->path_ = path;
  m->file_ = MappedFile::open(path);
  m->gguf_ = gguf::parse(m->file_.data(), m->file_.size(), m->file_.size(), path);
  MmprojLoader(*m).run();
  return m;
}

std::string Mmproj::describe() const {
  const MmprojConfig& c = cfg_;
  return strfmt("minicpmv4_6 ViT %d layers x %d (%d heads, ffn %d), patch %d, slice %d, %s weights, %dx compression%s, "
                "output %d",
                c.n_layer, c.n_embd, c.n_head, c.n_ff, c.patch_size, c.image_size, type_name(w_.layers[0].q.type),
                c.n_merge * c.n_merge, c.has_vit_merger() ? " (ViT merger: 4x or 16x)" : "", c.out_embd);
}

}  // namespace les::vision
