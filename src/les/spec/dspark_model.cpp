#include "les/spec/dspark_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "les/model/ops.h"
#include "les/model/work_buffers.h"
#include "les/quant/finite.h"
#include "les/quant/kernels.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les {

namespace {

// The value llama.cpp's F16 KV cache (and its F16 products with it) holds for x.
inline float round_f16(float x) { return fp16_to_f32(f32_to_fp16(x)); }

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Architecture table reader: every tensor is looked up with its expected shape; the ones read are
// remembered so that a tensor the architecture does not use is refused.
struct Reader {
  const gguf::File& f;
  const std::string& path;
  const uint8_t* base;
  std::vector<std::vector<float>>& owned;
  uint64_t& bytes;
  std::set<std::string> used;

  const gguf::TensorInfo* find(const std::string& name, std::vector<int64_t> want, bool required) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    if (!t) {
      if (required) {
        throw Error(strfmt("%s: missing tensor '%s' (expected shape %s) for architecture dflash", path.c_str(),
                           name.c_str(), shape_str(want).c_str()));
      }
      return nullptr;
    }
    std::vector<int64_t> have = t->ne;
    while (have.size() > 1 && have.back() == 1) have.pop_back();
    while (want.size() > 1 && want.back() == 1) want.pop_back();
    if (have != want) {
      throw Error(strfmt("%s: tensor '%s' has shape %s, expected %s", path.c_str(), name.c_str(),
                         shape_str(t->ne).c_str(), shape_str(want).c_str()));
    }
    used.insert(name);
    bytes += t->n_bytes;
    return t;
  }

  Matrix matrix(const std::string& name, int64_t n_in, int64_t n_out, bool required = true) {
    const gguf::TensorInfo* t = find(name, {n_in, n_out}, required);
    if (!t) return {};
    if (!info(t->type).weight_type || !kernels().dequantize[static_cast<uint32_t>(t->type)]) {
      throw Error(strfmt("%s: tensor '%s' has type %s, which is not a weight type", path.c_str(), name.c_str(),
                         type_name(t->type)));
    }
    return Matrix{t->type, n_in, n_out, row_bytes(t->type, n_in), base + f.data_offset + t->offset};
  }

  // A float vector of any shape, flattened (F16/BF16 converted to F32; NaN/Inf refused).
  Vec vec(const std::string& name, std::vector<int64_t> shape, bool required = true) {
    const gguf::TensorInfo* t = find(name, shape, required);
    if (!t) return {};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const uint8_t* p = base + f.data_offset + t->offset;
    if (const auto nf = find_nonfinite(t->type, p, n)) {
      throw Error(strfmt("%s: tensor '%s': %s", path.c_str(), name.c_str(), describe_nonfinite(t->type, *nf).c_str()));
    }
    if (t->type == Type::F32) return Vec{reinterpret_cast<const float*>(p), n};
    if (t->type != Type::F16 && t->type != Type::BF16) {
      throw Error(strfmt("%s: tensor '%s' has type %s; vectors must be F32, F16 or BF16", path.c_str(), name.c_str(),
                         type_name(t->type)));
    }
    std::vector<float> out(sz(n));
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[sz(i)] = t->type == Type::F16 ? fp16_to_f32(h) : bf16_to_f32(h);
    }
    owned.push_back(std::move(out));
    return Vec{owned.back().data(), n};
  }
};

int key_int(const gguf::File& f, const std::string& path, const std::string& key, int lo, int hi) {
  if (!f.find(key)) throw Error(strfmt("%s: missing key '%s' for architecture dflash", path.c_str(), key.c_str()));
  const int64_t v = f.get_int(key);
  if (v < lo || v > hi) {
    throw Error(strfmt("%s: key '%s' = %lld is outside [%d, %d]", path.c_str(), key.c_str(),
                       static_cast<long long>(v), lo, hi));
  }
  return static_cast<int>(v);
}

DsparkConfig read_config(const gguf::File& f, const std::string& path) {
  const std::string arch = f.get_string("general.architecture");
  if (arch != "dflash") {
    throw Error(strfmt("%s: architecture is '%s', expected 'dflash' (a DSpark/DFlash drafter)", path.c_str(),
                       arch.c_str()));
  }
  for (const char* k : {"dflash.hyper_connection.count", "dflash.attention.sliding_window",
                        "dflash.selector_rank", "dflash.conv_kernel_size"}) {
    if (f.find(k)) throw Error(strfmt("%s: key '%s': this dflash variant is not supported", path.c_str(), k));
  }
  if (f.get_string("dflash.hidden_activation", "silu") != "silu") {
    throw Error(strfmt("%s: dflash.hidden_activation '%s' is not supported (silu only)", path.c_str(),
                       f.get_string("dflash.hidden_activation").c_str()));
  }
  DsparkConfig c;
  c.n_layer = key_int(f, path, "dflash.block_count", 1, 1024);
  c.n_embd = key_int(f, path, "dflash.embedding_length", 1, 1 << 20);
  c.n_ff = key_int(f, path, "dflash.feed_forward_length", 1, 1 << 22);
  c.n_head = key_int(f, path, "dflash.attention.head_count", 1, 4096);
  c.n_head_kv = f.find("dflash.attention.head_count_kv") ? key_int(f, path, "dflash.attention.head_count_kv", 1, 4096)
                                                          : c.n_head;
  if (c.n_head % c.n_head_kv != 0) {
    throw Error(strfmt("%s: head_count %d is not a multiple of head_count_kv %d", path.c_str(), c.n_head, c.n_head_kv));
  }
  c.head_dim = f.find("dflash.attention.key_length") ? key_int(f, path, "dflash.attention.key_length", 2, 4096)
                                                      : c.n_embd / c.n_head;
  const int hdv = f.find("dflash.attention.value_length") ? key_int(f, path, "dflash.attention.value_length", 1, 4096)
                                                           : c.head_dim;
  if (hdv != c.head_dim) {
    throw Error(strfmt("%s: key_length %d != value_length %d (dflash needs equal head sizes)", path.c_str(),
                       c.head_dim, hdv));
  }
  c.n_rot = f.find("dflash.rope.dimension_count") ? key_int(f, path, "dflash.rope.dimension_count", 2, c.head_dim)
                                                   : c.head_dim;
  if (c.n_rot % 2 != 0) throw Error(strfmt("%s: rope.dimension_count %d is odd", path.c_str(), c.n_rot));
  c.rope_freq_base = static_cast<float>(f.get_float("dflash.rope.freq_base", 10000.0));
  if (f.find("dflash.rope.scaling.type") && f.get_string("dflash.rope.scaling.type") != "none") {
    throw Error(strfmt("%s: rope scaling '%s' is not supported", path.c_str(),
                       f.get_string("dflash.rope.scaling.type").c_str()));
  }
  if (!f.find("dflash.attention.layer_norm_rms_epsilon")) {
    throw Error(strfmt("%s: missing key 'dflash.attention.layer_norm_rms_epsilon'", path.c_str()));
  }
  c.rms_eps = static_cast<float>(f.get_float("dflash.attention.layer_norm_rms_epsilon"));
  c.attn_scale = static_cast<float>(f.get_float("dflash.attention.scale", 0.0));
  c.embd_scale = static_cast<float>(f.get_float("dflash.embedding_scale", 0.0));
  c.n_ctx_train = static_cast<int>(f.get_int("dflash.context_length", 0));
  c.block_size = f.find("dflash.block_size") ? key_int(f, path, "dflash.block_size", 1, 1024) : 16;
  c.causal = f.get_bool("dflash.attention.causal", false);
  c.sample_from_anchor = f.get_bool("dflash.sample_from_anchor", true);
  if (!c.sample_from_anchor && c.block_size < 2) {
    throw Error(strfmt("%s: block_size %d leaves no draft slot without sample_from_anchor", path.c_str(), c.block_size));
  }
  if (!f.find("tokenizer.ggml.mask_token_id")) {
    throw Error(strfmt("%s: missing key 'tokenizer.ggml.mask_token_id' (the block's MASK token)", path.c_str()));
  }
  c.mask_token = static_cast<int32_t>(f.get_int("tokenizer.ggml.mask_token_id"));
  const gguf::Value* tl = f.find("dflash.target_layers");
  if (!tl) throw Error(strfmt("%s: missing key 'dflash.target_layers'", path.c_str()));
  if (tl->type != gguf::ValueType::ARRAY || tl->arr.empty()) {
    throw Error(strfmt("%s: key 'dflash.target_layers' must be a non-empty integer array", path.c_str()));
  }
  for (const gguf::Value& v : tl->arr) {
    const int64_t l = v.as_int("dflash.target_layers");
    if (l < 0 || l > (1 << 20)) {
      throw Error(strfmt("%s: dflash.target_layers entry %lld is negative or too large", path.c_str(),
                         static_cast<long long>(l)));
    }
    c.target_layers.push_back(static_cast<int>(l));
  }
  return c;
}

}  // namespace

DsparkModel::~DsparkModel() = default;

std::unique_ptr<DsparkModel> DsparkModel::load(const std::string& path, const ModelConfig& target, int n_threads,
                                               int n_ctx) {
  std::unique_ptr<DsparkModel> m(new DsparkModel());
  const gguf::File f = gguf::read_file(path);
  m->cfg_ = read_config(f, path);
  DsparkConfig& c = m->cfg_;
  for (int l : c.target_layers) {
    if (l >= target.n_layer) {
      throw Error(strfmt("%s: dflash.target_layers entry %d is not a layer input of the target (%d layers)",
                         path.c_str(), l, target.n_layer));
    }
  }
  if (c.n_embd != target.n_embd) {
    throw Error(strfmt("%s: drafter n_embd %d != target n_embd %d", path.c_str(), c.n_embd, target.n_embd));
  }
  const gguf::TensorInfo* te = f.find_tensor("token_embd.weight");
  if (!te) {
    throw Error(strfmt("%s: missing tensor 'token_embd.weight' (drafters borrowing the target's embeddings are not "
                       "supported)", path.c_str()));
  }
  if (te->ne.size() != 2) throw Error(strfmt("%s: token_embd.weight is not a matrix", path.c_str()));
  c.n_vocab = static_cast<int>(te->ne[1]);
  if (c.n_vocab != target.n_vocab) {
    throw Error(strfmt("%s: drafter vocabulary %d != target vocabulary %d", path.c_str(), c.n_vocab, target.n_vocab));
  }
  if (c.mask_token < 0 || c.mask_token >= c.n_vocab) {
    throw Error(strfmt("%s: mask token %d is outside the vocabulary [0, %d)", path.c_str(), c.mask_token, c.n_vocab));
  }
  if (f.find_tensor("d2t")) throw Error(strfmt("%s: tensor 'd2t' (reduced draft vocabulary) is not supported", path.c_str()));
  const gguf::TensorInfo* mk = f.find_tensor("markov_w1.weight");
  if (!mk || mk->ne.empty()) {
    throw Error(strfmt("%s: missing tensor 'markov_w1.weight': not a DSpark drafter (plain DFlash is not supported)",
                       path.c_str()));
  }
  c.markov_rank = static_cast<int>(mk->ne[0]);
  if (n_ctx < c.block_size + 1) throw Error(strfmt("drafter context %d is smaller than a block + 1", n_ctx));

  m->file_ = MappedFile::open(path);
  if (m->file_.size() != f.file_size) throw Error(strfmt("%s: file changed while loading", path.c_str()));
  Reader rd{f, path, m->file_.data(), m->owned_, m->weight_bytes_, {}};
  const int64_t E = c.n_embd, V = c.n_vocab, R = c.markov_rank, hd = c.head_dim;
  const int64_t nq = int64_t(c.n_head) * hd, nkv = int64_t(c.n_head_kv) * hd;
  DsparkWeights& w = m->w_;
  w.tok_embd = rd.matrix("token_embd.weight", E, V);
  w.fc = rd.matrix("fc.weight", int64_t(c.target_layers.size()) * E, E);
  w.enc_norm = rd.vec("enc.output_norm.weight", {E});
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    DsparkLayer L;
    L.attn_norm = rd.vec(b + "attn_norm.weight", {E});
    L.wq = rd.matrix(b + "attn_q.weight", E, nq);
    L.wk = rd.matrix(b + "attn_k.weight", E, nkv);
    L.wv = rd.matrix(b + "attn_v.weight", E, nkv);
    L.wo = rd.matrix(b + "attn_output.weight", nq, E);
    L.q_norm = rd.vec(b + "attn_q_norm.weight", {hd});
    L.k_norm = rd.vec(b + "attn_k_norm.weight", {hd});
    L.ffn_norm = rd.vec(b + "ffn_norm.weight", {E});
    L.gate = rd.matrix(b + "ffn_gate.weight", E, c.n_ff);
    L.up = rd.matrix(b + "ffn_up.weight", E, c.n_ff);
    L.down = rd.matrix(b + "ffn_down.weight", c.n_ff, E);
    w.layers.push_back(L);
  }
  w.output_norm = rd.vec("output_norm.weight", {E});
  w.output = rd.matrix("output.weight", E, V, false);
  if (!w.output.present()) w.output = w.tok_embd;
  w.markov_w1 = rd.matrix("markov_w1.weight", R, V);
  w.markov_w2 = rd.matrix("markov_w2.weight", R, V);
  w.conf_w = rd.vec("conf_proj.weight", {E + R, 1}, false);
  w.conf_b = rd.vec("conf_proj.bias", {1}, false);
  if (w.conf_b.present() && !w.conf_w.present()) {
    throw Error(strfmt("%s: tensor 'conf_proj.bias' without 'conf_proj.weight'", path.c_str()));
  }
  for (const gguf::TensorInfo& t : f.tensors) {
    if (!rd.used.count(t.name)) {
      throw Error(strfmt("%s: tensor '%s' is not used by architecture dflash (this variant is not supported)",
                         path.c_str(), t.name.c_str()));
    }
  }

  m->n_ctx_ = n_ctx;
  m->pool_ = std::make_unique<ThreadPool>(std::max(1, n_threads));
  m->k_cache_.assign(sz(c.n_layer) * sz(n_ctx) * sz(nkv), 0.0f);
  m->v_cache_.assign(sz(c.n_layer) * sz(n_ctx) * sz(nkv), 0.0f);
  m->rope_.resize(sz(c.n_rot));
  return m;
}

uint64_t DsparkModel::bytes() const {
  size_t floats = k_cache_.size() + v_cache_.size();
  for (const std::vector<float>* b : {&h_, &xn_, &g_, &q_, &k_, &v_, &att_, &tmp_, &ff_g_, &ff_u_, &logits_, &w1_,
                                      &bias_, &rope_}) {
    floats += b->capacity();
  }
  size_t owned = 0;
  for (const auto& o : owned_) owned += o.size();
  return weight_bytes_ + (floats + owned) * sizeof(float) + acts_.buf.capacity() + acts2_.buf.capacity();
}

const float* DsparkModel::logits(int slot) const {
  LES_ASSERT(slot >= 0 && slot < n_block_);
  return logits_.data() + sz(slot) * sz(cfg_.n_vocab);
}

void DsparkModel::rollback(int n_pos) {
  if (n_pos < 0) throw Error(strfmt("drafter rollback to %d", n_pos));
  n_injected_ = std::min(n_injected_, n_pos);
}

void DsparkModel::project_kv(int il, const float* xn, int n, int pos0, float* q) {
  const DsparkLayer& L = w_.layers[sz(il)];
  const int64_t E = cfg_.n_embd, hd = cfg_.head_dim;
  const int64_t nq = int64_t(cfg_.n_head) * hd, nkv = int64_t(cfg_.n_head_kv) * hd;
  ensure(k_, sz(n) * sz(nkv));
  ensure(v_, sz(n) * sz(nkv));
  // The projections share their input: quantize it once per activation type.
  auto project = [&](const Matrix& W, float* out, int64_t width) {
    if (acts_.type != act_type(W.type) || acts_.n_tok != n || acts_.n_in != E) {
      quantize_acts(act_type(W.type), xn, n, E, E, acts_, pool_.get());
    }
    matmul(W, acts_, out, width, *pool_);
  };
  acts_.n_tok = -1;  // invalidate: xn is new
  if (q) project(L.wq, q, nq);
  project(L.wk, k_.data(), nkv);
  project(L.wv, v_.data(), nkv);

  ops::RopeParams rp;
  rp.n_rot = cfg_.n_rot;
  rp.type = RopeType::neox;
  rp.freq_base = cfg_.rope_freq_base;
  float* kc = k_cache_.data() + sz(il) * sz(n_ctx_) * sz(nkv);
  float* vc = v_cache_.data() + sz(il) * sz(n_ctx_) * sz(nkv);
  for (int i = 0; i < n; ++i) {
    ops::rope_cache(rp, pos0 + i, rope_.data());
    if (q) {
      for (int h = 0; h < cfg_.n_head; ++h) {
        float* x = q + sz(i) * sz(nq) + sz(h) * sz(hd);
        ops::rms_norm(x, L.q_norm.data, x, hd, cfg_.rms_eps);
        ops::rope_apply(rp, rope_.data(), x);
        // llama.cpp multiplies q with the F16 cache: q is converted to F16 first.
        for (int64_t d = 0; d < hd; ++d) x[d] = round_f16(x[d]);
      }
    }
    float* kr = kc + sz(pos0 + i) * sz(nkv);
    float* vr = vc + sz(pos0 + i) * sz(nkv);
    for (int h = 0; h < cfg_.n_head_kv; ++h) {
      float* x = k_.data() + sz(i) * sz(nkv) + sz(h) * sz(hd);
      ops::rms_norm(x, L.k_norm.data, x, hd, cfg_.rms_eps);
      ops::rope_apply(rp, rope_.data(), x);
    }
    for (int64_t j = 0; j < nkv; ++j) {
      kr[j] = round_f16(k_[sz(i) * sz(nkv) + sz(j)]);
      vr[j] = round_f16(v_[sz(i) * sz(nkv) + sz(j)]);
    }
  }
}

// Attention of the block (n slots at positions pos0..) over cache positions 0..pos0+i (causal) or
// 0..pos0+n-1, with llama.cpp's non-flash F16-cache arithmetic: F16 q and K, softmax in F32, the
// probabilities converted to F16 for the product with F16 V. One (slot, head) pair per task.
void DsparkModel::attention(int n, int pos0, const float* q, int il, float* out) {
  const int hd = cfg_.head_dim;
  const int64_t nq = int64_t(cfg_.n_head) * hd, nkv = int64_t(cfg_.n_head_kv) * hd;
  const int group = cfg_.n_head / cfg_.n_head_kv;
  const float scale = cfg_.attn_scale != 0.0f ? cfg_.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const float* kc = k_cache_.data() + sz(il) * sz(n_ctx_) * sz(nkv);
  const float* vc = v_cache_.data() + sz(il) * sz(n_ctx_) * sz(nkv);
  pool_->parallel_for(int64_t(n) * cfg_.n_head, 1, [&](int, int64_t b, int64_t e) {
    std::vector<float> sc(sz(pos0 + n));
    for (int64_t pi = b; pi < e; ++pi) {
      const int i = static_cast<int>(pi / cfg_.n_head), h = static_cast<int>(pi % cfg_.n_head);
      const int g = h / group;
      const int n_kv = cfg_.causal ? pos0 + i + 1 : pos0 + n;
      const float* qv = q + sz(i) * sz(nq) + sz(h) * sz(hd);
      for (int j = 0; j < n_kv; ++j) {
        const float* kv = kc + sz(j) * sz(nkv) + sz(g) * sz(hd);
        float acc = 0.0f;
        for (int d = 0; d < hd; ++d) acc += kv[d] * qv[d];
        sc[sz(j)] = acc * scale;
      }
      ops::softmax(sc.data(), n_kv);
      float* o = out + sz(i) * sz(nq) + sz(h) * sz(hd);
      for (int d = 0; d < hd; ++d) o[d] = 0.0f;
      for (int j = 0; j < n_kv; ++j) {
        const float* vv = vc + sz(j) * sz(nkv) + sz(g) * sz(hd);
        const float p = round_f16(sc[sz(j)]);
        for (int d = 0; d < hd; ++d) o[d] += p * vv[d];
      }
    }
  });
}

void DsparkModel::inject(const float* feats, int n) {
  if (n <= 0) return;
  if (int64_t(n_injected_) + n + cfg_.block_size > n_ctx_) {
    throw Error(strfmt("drafter context is full: %d injected + %d new + a block of %d > %d", n_injected_, n,
                       cfg_.block_size, n_ctx_));
  }
  const int64_t E = cfg_.n_embd, F = n_feat();
  ensure(g_, sz(n) * sz(E));
  matmul(w_.fc, feats, n, F, g_.data(), E, *pool_, acts2_);
  for (int i = 0; i < n; ++i) {
    float* x = g_.data() + sz(i) * sz(E);
    ops::rms_norm(x, w_.enc_norm.data, x, E, cfg_.rms_eps);
  }
  for (int il = 0; il < cfg_.n_layer; ++il) project_kv(il, g_.data(), n, n_injected_, nullptr);
  n_injected_ += n;
}

void DsparkModel::draft(int32_t id_last, int n_draft, std::vector<int32_t>& tokens, std::vector<float>& confidence) {
  if (n_draft < 1 || n_draft > max_draft()) {
    throw Error(strfmt("draft of %d tokens: this drafter drafts 1..%d", n_draft, max_draft()));
  }
  if (id_last < 0 || id_last >= cfg_.n_vocab) throw Error(strfmt("draft: token %d is out of range", id_last));
  const int i_beg = cfg_.sample_from_anchor ? 0 : 1;
  const int n = n_draft + i_beg;
  const int pos0 = n_injected_;
  LES_ASSERT(pos0 + n <= n_ctx_);  // inject() keeps room for a block
  n_block_ = n;
  const int64_t E = cfg_.n_embd, V = cfg_.n_vocab, FF = cfg_.n_ff, R = cfg_.markov_rank;
  const int64_t nq = int64_t(cfg_.n_head) * cfg_.head_dim;
  ensure(h_, sz(n) * sz(E));
  ensure(xn_, sz(n) * sz(E));
  ensure(tmp_, sz(n) * sz(E));
  ensure(q_, sz(n) * sz(nq));
  ensure(att_, sz(n) * sz(nq));
  ensure(ff_g_, sz(n) * sz(FF));
  ensure(ff_u_, sz(n) * sz(FF));
  ensure(logits_, sz(n) * sz(V));

  const DequantizeFn deq_embd = kernels().dequantize[static_cast<uint32_t>(w_.tok_embd.type)];
  for (int i = 0; i < n; ++i) {
    float* x = h_.data() + sz(i) * sz(E);
    deq_embd(w_.tok_embd.row(i == 0 ? id_last : cfg_.mask_token), x, E);
    if (cfg_.embd_scale != 0.0f) for (int64_t j = 0; j < E; ++j) x[j] *= cfg_.embd_scale;
  }

  for (int il = 0; il < cfg_.n_layer; ++il) {
    const DsparkLayer& L = w_.layers[sz(il)];
    for (int i = 0; i < n; ++i) {
      ops::rms_norm(h_.data() + sz(i) * sz(E), L.attn_norm.data, xn_.data() + sz(i) * sz(E), E, cfg_.rms_eps);
    }
    project_kv(il, xn_.data(), n, pos0, q_.data());
    attention(n, pos0, q_.data(), il, att_.data());
    matmul(L.wo, att_.data(), n, nq, tmp_.data(), E, *pool_, acts2_);
    for (int64_t j = 0; j < int64_t(n) * E; ++j) h_[sz(j)] = tmp_[sz(j)] + h_[sz(j)];

    for (int i = 0; i < n; ++i) {
      ops::rms_norm(h_.data() + sz(i) * sz(E), L.ffn_norm.data, xn_.data() + sz(i) * sz(E), E, cfg_.rms_eps);
    }
    quantize_acts(act_type(L.gate.type), xn_.data(), n, E, E, acts_, pool_.get());
    if (act_type(L.up.type) == acts_.type) {
      const MatmulJob jobs[] = {{&L.gate, ff_g_.data(), FF}, {&L.up, ff_u_.data(), FF}};
      matmul_many(jobs, acts_, *pool_);
    } else {
      matmul(L.gate, acts_, ff_g_.data(), FF, *pool_);
      quantize_acts(act_type(L.up.type), xn_.data(), n, E, E, acts_, pool_.get());
      matmul(L.up, acts_, ff_u_.data(), FF, *pool_);
    }
    acts_.n_tok = -1;
    for (int64_t j = 0; j < int64_t(n) * FF; ++j) ff_g_[sz(j)] = ops::silu(ff_g_[sz(j)]) * ff_u_[sz(j)];
    matmul(L.down, ff_g_.data(), n, FF, tmp_.data(), E, *pool_, acts2_);
    for (int64_t j = 0; j < int64_t(n) * E; ++j) h_[sz(j)] = tmp_[sz(j)] + h_[sz(j)];
  }

  for (int i = 0; i < n; ++i) {
    ops::rms_norm(h_.data() + sz(i) * sz(E), w_.output_norm.data, xn_.data() + sz(i) * sz(E), E, cfg_.rms_eps);
  }
  matmul(w_.output, xn_.data(), n, E, logits_.data(), V, *pool_, acts2_);

  // Markov chain (greedy, as llama.cpp's in-graph chain) and confidence head.
  tokens.clear();
  confidence.clear();
  ensure(w1_, sz(E + R));
  ensure(bias_, sz(V));
  const DequantizeFn deq_w1 = kernels().dequantize[static_cast<uint32_t>(w_.markov_w1.type)];
  int32_t prev = id_last;
  for (int i = i_beg; i < n; ++i) {
    float* lg = logits_.data() + sz(i) * sz(V);
    float* feat = w1_.data();  // [output_norm(h_i) ; markov_w1[prev]]
    std::memcpy(feat, xn_.data() + sz(i) * sz(E), sz(E) * sizeof(float));
    deq_w1(w_.markov_w1.row(prev), feat + E, R);
    matmul(w_.markov_w2, feat + E, 1, R, bias_.data(), V, *pool_, acts2_);
    for (int64_t v = 0; v < V; ++v) lg[v] += bias_[sz(v)];
    if (has_confidence()) {
      float acc = 0.0f;
      for (int64_t j = 0; j < E + R; ++j) acc += w_.conf_w.data[j] * feat[j];
      if (w_.conf_b.present()) acc += w_.conf_b.data[0];
      confidence.push_back(ops::sigmoid(acc));
    }
    prev = static_cast<int32_t>(std::max_element(lg, lg + V) - lg);  // first maximum, as ggml_argmax
    tokens.push_back(prev);
  }
}

}  // namespace les
