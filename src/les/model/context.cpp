#include "les/model/context.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "les/model/attention_core.h"
#include "les/model/ops.h"
#include "les/model/router.h"
#include "les/quant/kernels.h"
#include "les/model/work_buffers.h"
#include "les/util/error.h"

namespace les {

Context::Context(const Model& model, const ContextParams& p, ExpertSource* experts)
    : model_(model), cfg_(model.config()), experts_(experts), pool_(std::max(1, p.n_threads)) {
  if (!experts_) {
    owned_source_ = std::make_unique<ResidentExperts>(model.weights());
    experts_ = owned_source_.get();
  }
  pool_.set_on_job([this] { experts_->service_io(); });
  n_ctx_ = p.n_ctx > 0 ? p.n_ctx : std::min(cfg_.n_ctx_train, 4096);
  if (n_ctx_ < 1) throw Error("context size must be >= 1");
  n_batch_ = std::max(1, p.n_batch);
  int n_kv_layers = 0, n_rec_layers = 0;
  for (int il = 0; il < cfg_.n_layer; ++il) {
    const bool rec = cfg_.is_recurrent(il);
    kv_slot_.push_back(rec ? -1 : n_kv_layers++);
    rec_slot_.push_back(rec ? n_rec_layers++ : -1);
  }
  if (has_mtp()) {  // the MTP block is layer n_layer, an attention layer with its own KV cache
    kv_slot_.push_back(n_kv_layers++);
    rec_slot_.push_back(-1);
  }
  // KV cache: n_kv_layers x n_ctx rows of K and V (MLA: the compressed f32 rows only); a size that
  // overflows or cannot be allocated is an error naming the context size, not std::bad_alloc.
  if (cfg_.mla()) {
    k_rows_.allocate(n_kv_layers, n_ctx_, cfg_.kv_floats_per_pos(), cfg_.kv_floats_per_pos(), Type::F32);
    v_rows_.allocate(0, n_ctx_, 0, 0, Type::F32);
  } else {
    check_kv_head_dim(p.type_k, cfg_.head_dim_k, "KV cache type of K");
    check_kv_head_dim(p.type_v, cfg_.head_dim_v, "KV cache type of V");
    if ((p.type_k != Type::F32 || p.type_v != Type::F32) && cfg_.head_dim_v % 16 != 0) {
      throw Error(strfmt("KV cache types other than f32 need value heads of a multiple of 16 values; this model's have %d",
                         cfg_.head_dim_v));
    }
    k_rows_.allocate(n_kv_layers, n_ctx_, cfg_.n_kv_k(), cfg_.head_dim_k, p.type_k);
    v_rows_.allocate(n_kv_layers, n_ctx_, cfg_.n_kv_v(), cfg_.head_dim_v, p.type_v);
  }
  tokens_.assign(sz(n_ctx_), 0);
  embd_row_.assign(sz(n_ctx_), -1);
  if (n_rec_layers > 0) {
    rec_ = std::make_unique<RecurrentState>(cfg_);
    delta_net_ = std::make_unique<DeltaNetMixer>(cfg_);
    delta_net_->set_chunked(p.chunked_delta_rule);
  }
  if (cfg_.attn_output_gate) gated_attn_ = std::make_unique<GatedAttentionMixer>(cfg_);
  if (cfg_.mla()) mla_ = std::make_unique<MlaAttention>(cfg_);
  rope_cache_.resize(sz(cfg_.n_rot));
}

Context::~Context() = default;

void Context::set_matmul_observer(MatmulInputObserver obs) {
  if (obs && !product_names_) product_names_ = std::make_unique<ProductNames>(product_names(cfg_, model_.gguf()));
  matmul_observer_ = std::move(obs);
}

uint64_t Context::state_bytes() const {
  const uint64_t kv = k_rows_.bytes() + v_rows_.bytes();
  const uint64_t work = (h_.size() + xn_.size() + q_.size() + k_.size() + v_.size() + att_.size() + tmp_.size() +
                         router_logits_.size() + logits_.size() + expert_out_.size() + ex_in_.size() +
                         ex_g_.size() + ex_u_.size() + ex_y_.size()) * sizeof(float);
  const uint64_t recurrent = rec_ ? rec_->bytes() + delta_net_->bytes() : 0;
  const uint64_t gated = (gated_attn_ ? gated_attn_->bytes() : 0) + (mla_ ? mla_->bytes() : 0);
  const uint64_t mtp = (hidden_.size() + mtp_in_.size() + mtp_hidden_.size() + mtp_logits_.size()) * sizeof(float);
  return kv + work + recurrent + gated + mtp;
}

const float* Context::logits(int i) const {
  LES_ASSERT(i >= 0 && i < n_outputs_);
  return logits_.data() + sz(i) * sz(cfg_.n_vocab);
}

const float* Context::hidden(int i) const {
  LES_ASSERT(i >= 0 && i < n_outputs_);
  return hidden_.data() + sz(i) * sz(cfg_.n_embd);
}

void Context::rollback(int n) {
  if (n < 0 || n > n_past_) throw Error(strfmt("rollback to %d is outside [0, %d]", n, n_past_));
  // Embedding rows of forgotten positions go (rows are stored in position order).
  int64_t rows_kept = 0;
  for (int p = n - 1; p >= 0; --p) {
    if (embd_row_[sz(p)] >= 0) {
      rows_kept = embd_row_[sz(p)] + 1;
      break;
    }
  }
  for (int p = n; p < n_past_; ++p) embd_row_[sz(p)] = -1;
  embd_rows_.resize(sz(rows_kept) * sz(cfg_.n_embd));
  if (!rec_ || n == n_past_) {
    n_past_ = n;
    return;
  }
  // A recurrent state cannot be truncated: restart from the snapshot (or from zero) and replay.
  int from = 0;
  if (n >= rec_->snapshot_pos()) {
    from = rec_->snapshot_pos();
    rec_->restore_snapshot();
  } else {
    rec_->reset();
  }
  n_past_ = from;
  replay(from, n);
}

void Context::repeat_positions(int n) {
  if (n_past_ == 0) throw Error("repeat_positions: the context is empty");
  if (n <= n_past_ || n > n_ctx_) throw Error(strfmt("repeat_positions: %d is outside (%d, %d]", n, n_past_, n_ctx_));
  const int n_kv_layers = static_cast<int>(std::count_if(kv_slot_.begin(), kv_slot_.end(), [](int s) { return s >= 0; }));
  for (int layer = 0; layer < n_kv_layers; ++layer) {
    for (KvRows* rows : {&k_rows_, &v_rows_}) {
      if (rows->row_bytes() == 0) continue;
      for (int p = n_past_; p < n; ++p) std::memcpy(rows->row(layer, p), rows->row(layer, p % n_past_), rows->row_bytes());
    }
  }
  for (int p = n_past_; p < n; ++p) {
    tokens_[sz(p)] = tokens_[sz(p % n_past_)];
    embd_row_[sz(p)] = -1;
  }
  n_past_ = n;
}

void Context::replay(int from, int to) {
  if (from >= to) return;
  rec_->begin_eval(from);
  eval_batches(from, to, false, false, -1);
  experts_->on_token_done();
}

void Context::eval_batches(int b, int e, bool all_logits, bool logits_last, int out_base) {
  const int64_t E = cfg_.n_embd;
  for (int p = b; p < e; p += n_batch_) {
    const int n = std::min(n_batch_, e - p);
    // A batch with embedding rows takes its inputs from here: rows as given, tokens embedded.
    const float* h_in = nullptr;
    bool rows = false;
    for (int i = p; i < p + n && !rows; ++i) rows = embd_row_[sz(i)] >= 0;
    if (rows) {
      const ModelWeights& w = model_.weights();
      const DequantizeFn deq = kernels().dequantize[static_cast<uint32_t>(w.tok_embd.type)];
      LES_ASSERT(deq != nullptr);
      ensure(mixed_in_, sz(n) * sz(E));
      for (int i = 0; i < n; ++i) {
        float* dst = mixed_in_.data() + sz(i) * sz(E);
        const int32_t r = embd_row_[sz(p + i)];
        if (r >= 0) {
          std::memcpy(dst, embd_rows_.data() + sz(r) * sz(E), sz(E) * sizeof(float));
        } else {
          deq(w.tok_embd.row(tokens_[sz(p + i)]), dst, E);
        }
      }
      h_in = mixed_in_.data();
    }
    int base = -1;
    if (all_logits) base = out_base + (p - b);
    else if (logits_last && p + n == e) base = 0;
    forward_chunk(tokens_.data() + p, n, all_logits, base, 0, h_in);
  }
}

void Context::check_token_ids(std::span<const int32_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= cfg_.n_vocab) {
      throw Error(strfmt("token id %d at index %zu is out of range [0, %d)", tokens[i], i, cfg_.n_vocab));
    }
  }
}

void Context::eval_mixed(std::span<const int32_t> tokens, const float* embd, int64_t n_rows, bool all_logits) {
  if (tokens.empty()) throw Error("eval: no tokens");
  int64_t rows = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == kEmbeddingRow) {
      ++rows;
    } else if (tokens[i] < 0 || tokens[i] >= cfg_.n_vocab) {
      throw Error(strfmt("token id %d at index %zu is out of range [0, %d)", tokens[i], i, cfg_.n_vocab));
    }
  }
  if (rows != n_rows || (rows > 0 && embd == nullptr)) {
    throw Error(strfmt("eval: %lld embedding positions but %lld rows given", static_cast<long long>(rows),
                       static_cast<long long>(n_rows)));
  }
  if (n_past_ + static_cast<int64_t>(tokens.size()) > n_ctx_) {
    throw Error(strfmt("context is full: %d positions used + %zu new tokens > context size %d", n_past_,
                       tokens.size(), n_ctx_));
  }
  const int n_total = static_cast<int>(tokens.size());
  const int64_t E = cfg_.n_embd;
  int64_t next_row = static_cast<int64_t>(embd_rows_.size()) / E;
  embd_rows_.insert(embd_rows_.end(), embd, embd + rows * E);
  for (int i = 0; i < n_total; ++i) {
    tokens_[sz(n_past_ + i)] = tokens[sz(i)];
    embd_row_[sz(n_past_ + i)] = tokens[sz(i)] == kEmbeddingRow ? static_cast<int32_t>(next_row++) : -1;
  }
  if (rec_) rec_->begin_eval(n_past_);
  n_outputs_ = all_logits ? n_total : 1;
  ensure(logits_, sz(n_outputs_) * sz(cfg_.n_vocab));
  ensure(hidden_, sz(n_outputs_) * sz(cfg_.n_embd));
  eval_batches(n_past_, n_past_ + n_total, all_logits, true, 0);
  experts_->on_token_done();
}

void Context::eval(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) throw Error("eval: no tokens");
  check_token_ids(tokens);
  if (n_past_ + static_cast<int64_t>(tokens.size()) > n_ctx_) {
    throw Error(strfmt("context is full: %d positions used + %zu new tokens > context size %d", n_past_,
                       tokens.size(), n_ctx_));
  }
  const int n_total = static_cast<int>(tokens.size());
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + n_past_);
  std::fill(embd_row_.begin() + n_past_, embd_row_.begin() + n_past_ + n_total, -1);
  if (rec_) rec_->begin_eval(n_past_);
  n_outputs_ = all_logits ? n_total : 1;
  ensure(logits_, sz(n_outputs_) * sz(cfg_.n_vocab));
  ensure(hidden_, sz(n_outputs_) * sz(cfg_.n_embd));
  for (int b = 0; b < n_total; b += n_batch_) {
    const int n = std::min(n_batch_, n_total - b);
    const bool last_chunk = b + n == n_total;
    if (all_logits) {
      forward_chunk(tokens.data() + b, n, true, b);
    } else {
      forward_chunk(tokens.data() + b, n, false, last_chunk ? 0 : -1);
    }
  }
  experts_->on_token_done();
}

void Context::eval_together(std::span<const SeqTokens> batch) {
  for (const SeqTokens& b : batch) {
    if (!b.ctx || &b.ctx->model_ != &model_) throw Error("eval_together: a context of another model");
    // (resident contexts each own a view of the same mapped experts: any of them serves)
    if (b.ctx->experts_ != experts_ && !(b.ctx->owned_source_ && owned_source_)) {
      throw Error("eval_together: a context with another expert source");
    }
    for (const SeqTokens& o : batch) {
      if (&o != &b && o.ctx == b.ctx) throw Error("eval_together: a context given twice");
    }
    check_token_ids(b.tokens);
    if (b.tokens.empty()) throw Error("eval_together: a sequence without tokens");
    if (b.ctx->n_past_ + static_cast<int64_t>(b.tokens.size()) > b.ctx->n_ctx_) {
      throw Error(strfmt("context is full: %d positions used + %zu new tokens > context size %d", b.ctx->n_past_,
                         b.tokens.size(), b.ctx->n_ctx_));
    }
  }
  // Every sequence's tokens in order, cut into passes of n_batch tokens (a sequence may span two).
  const int64_t E = cfg_.n_embd;
  for (const SeqTokens& b : batch) {
    Context& c = *b.ctx;
    std::copy(b.tokens.begin(), b.tokens.end(), c.tokens_.begin() + c.n_past_);
    std::fill(c.embd_row_.begin() + c.n_past_, c.embd_row_.begin() + c.n_past_ + static_cast<int64_t>(b.tokens.size()), -1);
    if (c.rec_) c.rec_->begin_eval(c.n_past_);
    c.n_outputs_ = 1;
    ensure(c.logits_, sz(cfg_.n_vocab));
    ensure(c.hidden_, sz(E));
  }
  const ModelWeights& w = model_.weights();
  const DequantizeFn deq = kernels().dequantize[static_cast<uint32_t>(w.tok_embd.type)];
  LES_ASSERT(deq != nullptr);
  size_t seq = 0, done = 0;  // the next token: batch[seq].tokens[done]
  while (seq < batch.size()) {
    segs_.clear();
    int n = 0;
    while (seq < batch.size() && n < n_batch_) {
      const SeqTokens& b = batch[seq];
      const int take = static_cast<int>(std::min<size_t>(b.tokens.size() - done, static_cast<size_t>(n_batch_ - n)));
      segs_.push_back(Segment{b.ctx, n, take, b.ctx->n_past_});
      n += take;
      done += static_cast<size_t>(take);
      if (done == b.tokens.size()) {
        ++seq;
        done = 0;
      }
    }
    ensure(h_, sz(n) * sz(E));
    ensure(xn_, sz(n) * sz(E));
    ensure(tmp_, sz(n) * sz(E));
    for (const Segment& sg : segs_) {
      for (int i = 0; i < sg.n; ++i) {
        deq(w.tok_embd.row(sg.ctx->tokens_[sz(sg.pos0 + i)]), h_.data() + sz(sg.begin + i) * sz(E), E);
      }
    }
    run_layers(n, 0, 0);
    // Logits of the sequences whose last token is in this pass, in one product.
    std::vector<const Segment*> ends;
    for (const Segment& sg : segs_) {
      sg.ctx->n_past_ += sg.n;
      if (&sg == &segs_.back() && seq < batch.size() && done > 0 && batch[seq].ctx == sg.ctx) continue;  // continues
      ends.push_back(&sg);
    }
    const int rows = static_cast<int>(ends.size());
    for (int r = 0; r < rows; ++r) {
      const Segment& sg = *ends[sz(r)];
      ops::rms_norm(h_.data() + sz(sg.begin + sg.n - 1) * sz(E), w.output_norm.data, xn_.data() + sz(r) * sz(E), E,
                    cfg_.rms_eps);
      std::memcpy(sg.ctx->hidden_.data(), xn_.data() + sz(r) * sz(E), sz(E) * sizeof(float));
    }
    ensure(together_logits_, sz(rows) * sz(cfg_.n_vocab));
    matmul(w.output, xn_.data(), rows, E, together_logits_.data(), cfg_.n_vocab, pool_, acts_);
    for (int r = 0; r < rows; ++r) {
      std::memcpy(ends[sz(r)]->ctx->logits_.data(), together_logits_.data() + sz(r) * sz(cfg_.n_vocab),
                  sz(cfg_.n_vocab) * sizeof(float));
    }
  }
  segs_.clear();
  experts_->on_token_done();
}

void Context::eval_from_layer(std::span<const int32_t> tokens, int first_layer, const float* h_in) {
  if (n_past_ != 0) throw Error("eval_from_layer: the context is not empty");
  if (first_layer < 0 || first_layer > cfg_.n_layer) {
    throw Error(strfmt("eval_from_layer: layer %d is outside [0, %d]", first_layer, cfg_.n_layer));
  }
  if (tokens.empty() || static_cast<int64_t>(tokens.size()) > n_ctx_) {
    throw Error(strfmt("eval_from_layer: %zu tokens for a context of %d", tokens.size(), n_ctx_));
  }
  check_token_ids(tokens);
  const int n_total = static_cast<int>(tokens.size());
  std::copy(tokens.begin(), tokens.end(), tokens_.begin());
  std::fill(embd_row_.begin(), embd_row_.begin() + n_total, -1);
  embd_rows_.clear();
  if (rec_) rec_->begin_eval(0);
  n_outputs_ = n_total;
  ensure(logits_, sz(n_outputs_) * sz(cfg_.n_vocab));
  ensure(hidden_, sz(n_outputs_) * sz(cfg_.n_embd));
  for (int b = 0; b < n_total; b += n_batch_) {
    const int n = std::min(n_batch_, n_total - b);
    forward_chunk(tokens.data() + b, n, true, b, first_layer, h_in + sz(b) * sz(cfg_.n_embd));
  }
  experts_->on_token_done();
}

void Context::forward_chunk(const int32_t* tokens, int n, bool all_logits, int out_base, int first_layer,
                            const float* h_in) {
  const ModelWeights& w = model_.weights();
  const int64_t E = cfg_.n_embd;
  ensure(h_, sz(n) * sz(E));
  ensure(xn_, sz(n) * sz(E));
  ensure(tmp_, sz(n) * sz(E));

  if (h_in) {
    std::memcpy(h_.data(), h_in, sz(n) * sz(E) * sizeof(float));
  } else {
    // Token embeddings.
    const DequantizeFn deq = kernels().dequantize[static_cast<uint32_t>(w.tok_embd.type)];
    LES_ASSERT(deq != nullptr);
    for (int i = 0; i < n; ++i) deq(w.tok_embd.row(tokens[i]), h_.data() + sz(i) * sz(E), E);
    if (observer_) observer_(-1, "inp_embd", h_.data(), n, E);
  }

  run_layers(n, n_past_, h_in ? first_layer : 0);
  n_past_ += n;

  // Output head for the rows that need logits.
  if (out_base < 0) return;
  const int first = all_logits ? 0 : n - 1;
  const int rows = n - first;
  for (int i = first; i < n; ++i) {
    ops::rms_norm(h_.data() + sz(i) * sz(E), w.output_norm.data, xn_.data() + sz(i - first) * sz(E), E, cfg_.rms_eps);
  }
  if (observer_) observer_(-1, "result_norm", xn_.data(), rows, E);
  if (matmul_observer_) matmul_observer_(product_names_->output, -1, xn_.data(), rows, E);
  std::memcpy(hidden_.data() + sz(out_base) * sz(E), xn_.data(), sz(rows) * sz(E) * sizeof(float));
  matmul(w.output, xn_.data(), rows, E, logits_.data() + sz(out_base) * sz(cfg_.n_vocab), cfg_.n_vocab, pool_, acts_);
}

void Context::run_layers(int n, int pos0, int first_layer) {
  for (int il = first_layer; il < cfg_.n_layer; ++il) {
    if (cfg_.arch == Arch::qwen35moe || cfg_.arch == Arch::qwen3next || mla_) {
      hybrid_mixer(model_.weights().layers[sz(il)], il, n, pos0);
    } else {
      attention(model_.weights().layers[sz(il)], il, n, pos0);
    }
    ffn(model_.weights().layers[sz(il)], il, n);
    experts_->on_layer_output(il, h_.data(), n);
    if (observer_) observer_(il, "l_out", h_.data(), n, cfg_.n_embd);
  }
}

void Context::attention(const LayerWeights& L, int il, int n, int pos0) {
  const int64_t E = cfg_.n_embd;
  const int hd = cfg_.head_dim_k, hdv = cfg_.head_dim_v;
  const int64_t nq = cfg_.n_q(), nk = cfg_.n_kv_k(), nv = cfg_.n_kv_v();
  ensure(q_, sz(n) * sz(nq));
  ensure(k_, sz(n) * sz(nk));
  ensure(v_, sz(n) * sz(nv));
  ensure(att_, sz(n) * sz(cfg_.n_head) * sz(hdv));

  for (int i = 0; i < n; ++i) {
    ops::rms_norm(h_.data() + sz(i) * sz(E), L.attn_norm.data, xn_.data() + sz(i) * sz(E), E, cfg_.rms_eps);
  }
  if (observer_) observer_(il, "attn_norm", xn_.data(), n, E);

  // Q, K, V share the input: quantize it once when their types agree.
  auto project = [&](const Matrix& W, const Vec& b, std::vector<float>& out, int64_t width) {
    if (acts_.type != act_type(W.type) || acts_.n_tok != n || acts_.n_in != E) {
      quantize_acts(act_type(W.type), xn_.data(), n, E, E, acts_, &pool_);
    }
    matmul(W, acts_, out.data(), width, pool_);
    if (b.present()) {
      for (int i = 0; i < n; ++i) {
        float* row = out.data() + sz(i) * sz(width);
        for (int64_t j = 0; j < width; ++j) row[j] += b.data[j];
      }
    }
  };
  if (matmul_observer_) {
    observe(il, Product::attn_q, -1, xn_.data(), n, E);
    observe(il, Product::attn_k, -1, xn_.data(), n, E);
    observe(il, Product::attn_v, -1, xn_.data(), n, E);
  }
  acts_.n_tok = -1;  // invalidate
  project(L.wq, L.bq, q_, nq);
  project(L.wk, L.bk, k_, nk);
  project(L.wv, L.bv, v_, nv);

  // q/k norms.
  if (cfg_.qk_norm == QkNorm::per_head) {
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < cfg_.n_head; ++h) {
        float* x = q_.data() + sz(i) * sz(nq) + sz(h) * sz(hd);
        ops::rms_norm(x, L.q_norm.data, x, hd, cfg_.rms_eps);
      }
      for (int h = 0; h < cfg_.n_head_kv; ++h) {
        float* x = k_.data() + sz(i) * sz(nk) + sz(h) * sz(hd);
        ops::rms_norm(x, L.k_norm.data, x, hd, cfg_.rms_eps);
      }
    }
  } else if (cfg_.qk_norm == QkNorm::full) {
    for (int i = 0; i < n; ++i) {
      float* xq = q_.data() + sz(i) * sz(nq);
      ops::rms_norm(xq, L.q_norm.data, xq, nq, cfg_.rms_eps);
      float* xk = k_.data() + sz(i) * sz(nk);
      ops::rms_norm(xk, L.k_norm.data, xk, nk, cfg_.rms_eps);
    }
  }

  // RoPE.
  ops::RopeParams rp;
  rp.n_rot = cfg_.n_rot;
  rp.type = cfg_.rope_type;
  rp.freq_base = cfg_.rope_base(il);
  rp.freq_scale = cfg_.rope_freq_scale;
  rp.freq_factors = model_.weights().rope_freqs.data;
  ops::set_yarn(rp, cfg_);
  Segment solo;
  const std::span<const Segment> segs = segments(n, pos0, solo);
  for (const Segment& sg : segs) {
    for (int i = sg.begin; i < sg.begin + sg.n; ++i) {
    ops::rope_cache(rp, sg.pos0 + (i - sg.begin), rope_cache_.data());
    for (int h = 0; h < cfg_.n_head; ++h) ops::rope_apply(rp, rope_cache_.data(), q_.data() + sz(i) * sz(nq) + sz(h) * sz(hd));
    for (int h = 0; h < cfg_.n_head_kv; ++h) ops::rope_apply(rp, rope_cache_.data(), k_.data() + sz(i) * sz(nk) + sz(h) * sz(hd));
    }
  }

  // Quantized caches hold rotated rows (kv_cache.h): queries and keys alike, values here and the
  // output back after attention.
  const int rot_k = kv_rotation_k(k_rows_.type(), hd), rot_v = kv_rotation_v(v_rows_.type(), hdv);
  if (rot_k) {
    ops::hadamard_blocks(q_.data(), int64_t(n) * nq, rot_k);
    ops::hadamard_blocks(k_.data(), int64_t(n) * nk, rot_k);
  }
  if (rot_v) ops::hadamard_blocks(v_.data(), int64_t(n) * nv, rot_v);

  // Append to each sequence's KV cache, and attend over it.
  const int slot = kv_slot_[sz(il)];

  // Causal attention, one (token, head) pair per task.
  AttentionShape as{cfg_.n_head, cfg_.n_head_kv, hd, hdv, 1.0f / std::sqrt(static_cast<float>(hd))};
  as.sinks = L.attn_sinks.data;
  as.window = cfg_.is_swa(il) ? cfg_.n_swa : 0;
  attn_seqs_.clear();
  for (const Segment& sg : segs) {
    sg.ctx->k_rows_.write(slot, sg.pos0, k_.data() + sz(sg.begin) * sz(nk), sg.n);
    sg.ctx->v_rows_.write(slot, sg.pos0, v_.data() + sz(sg.begin) * sz(nv), sg.n);
    attn_seqs_.push_back({q_.data() + sz(sg.begin) * sz(nq), sg.ctx->k_rows_.view(slot), sg.ctx->v_rows_.view(slot), sg.n,
                          sg.pos0, att_.data() + sz(sg.begin) * sz(cfg_.n_head) * sz(hdv)});
  }
  causal_attention(as, nq, attn_seqs_, pool_);
  if (rot_v) ops::hadamard_blocks(att_.data(), int64_t(n) * cfg_.n_head * hdv, rot_v);
  if (observer_) observer_(il, "kqv_out", att_.data(), n, cfg_.n_head * hdv);

  if (matmul_observer_) observe(il, Product::attn_output, -1, att_.data(), n, cfg_.n_head * hdv);
  matmul(L.wo, att_.data(), n, cfg_.n_head * hdv, tmp_.data(), E, pool_, acts_);
  for (int i = 0; i < n; ++i) {
    float* t = tmp_.data() + sz(i) * sz(E);
    float* hr = h_.data() + sz(i) * sz(E);
    if (L.bo.present()) for (int64_t j = 0; j < E; ++j) t[j] += L.bo.data[j];
    for (int64_t j = 0; j < E; ++j) hr[j] = t[j] + hr[j];
  }
  if (observer_) observer_(il, "ffn_inp", h_.data(), n, E);
}

void Context::hybrid_mixer(const LayerWeights& L, int il, int n, int pos0) {
  const int64_t E = cfg_.n_embd;
  for (int i = 0; i < n; ++i) {
    ops::rms_norm(h_.data() + sz(i) * sz(E), L.attn_norm.data, xn_.data() + sz(i) * sz(E), E, cfg_.rms_eps);
  }
  if (observer_) observer_(il, "attn_norm", xn_.data(), n, E);
  ProductTap tap;
  if (matmul_observer_) {
    tap = [this, il](Product p, const float* x, int64_t rows, int64_t n_in) { observe(il, p, -1, x, rows, n_in); };
  }
  const ProductTap* tp = matmul_observer_ ? &tap : nullptr;
  Segment solo;
  for (const Segment& sg : segments(n, pos0, solo)) {
    const float* x = xn_.data() + sz(sg.begin) * sz(E);
    float* out = tmp_.data() + sz(sg.begin) * sz(E);
    if (rec_slot_[sz(il)] >= 0) {
      delta_net_->forward(L, *sg.ctx->rec_, rec_slot_[sz(il)], x, sg.n, out, pool_, tp);
    } else if (mla_) {
      float* cache = reinterpret_cast<float*>(sg.ctx->k_rows_.row(kv_slot_[sz(il)], 0));
      mla_->forward(L, x, sg.n, sg.pos0, cache, out, pool_, tp);
    } else {
      const int slot = kv_slot_[sz(il)];
      gated_attn_->forward(L, x, sg.n, sg.pos0, sg.ctx->k_rows_, sg.ctx->v_rows_, slot, out, pool_, tp);
    }
  }
  if (observer_) observer_(il, "mixer_out", tmp_.data(), n, E);
  for (int i = 0; i < n; ++i) {
    float* t = tmp_.data() + sz(i) * sz(E);
    float* hr = h_.data() + sz(i) * sz(E);
    for (int64_t j = 0; j < E; ++j) hr[j] = t[j] + hr[j];
  }
  if (observer_) observer_(il, "ffn_inp", h_.data(), n, E);
}

namespace {
// rows[i][j] += b[j] for i < m, j < w.
void add_row_bias(float* rows, int64_t m, int64_t w, const float* b) {
  for (int64_t i = 0; i < m; ++i) {
    float* r = rows + i * w;
    for (int64_t j = 0; j < w; ++j) r[j] = r[j] + b[j];
  }
}
}  // namespace

void Context::dense_lead_ffn(const LayerWeights& L, int il, int n) {
  const int64_t E = cfg_.n_embd, F = cfg_.n_ff_dense;
  ensure(sh_g_, sz(n) * sz(F));
  ensure(sh_u_, sz(n) * sz(F));
  if (matmul_observer_) {
    observe(il, Product::ffn_gate, -1, xn_.data(), n, E);
    observe(il, Product::ffn_up, -1, xn_.data(), n, E);
  }
  quantize_acts(act_type(L.ffn_gate.type), xn_.data(), n, E, E, acts_, &pool_);
  if (act_type(L.ffn_up.type) == acts_.type) {
    const MatmulJob jobs[] = {{&L.ffn_gate, sh_g_.data(), F}, {&L.ffn_up, sh_u_.data(), F}};
    matmul_many(jobs, acts_, pool_);
  } else {
    matmul(L.ffn_gate, acts_, sh_g_.data(), F, pool_);
    quantize_acts(act_type(L.ffn_up.type), xn_.data(), n, E, E, acts_, &pool_);
    matmul(L.ffn_up, acts_, sh_u_.data(), F, pool_);
  }
  for (int64_t j = 0; j < int64_t(n) * F; ++j) sh_g_[sz(j)] = ops::silu(sh_g_[sz(j)]) * sh_u_[sz(j)];
  if (matmul_observer_) observe(il, Product::ffn_down, -1, sh_g_.data(), n, F);
  matmul(L.ffn_down, sh_g_.data(), n, F, tmp_.data(), E, pool_, acts2_);
  if (observer_) observer_(il, "ffn_moe_out", tmp_.data(), n, E);
  for (int i = 0; i < n; ++i) {
    float* hr = h_.data() + sz(i) * sz(E);
    const float* t = tmp_.data() + sz(i) * sz(E);
    for (int64_t j = 0; j < E; ++j) hr[j] = t[j] + hr[j];
  }
}

void Context::ffn(const LayerWeights& L, int il, int n) {
  const bool trunk = il < cfg_.n_layer;  // il == n_layer: the MTP block (expert layer n_layer)
  const int64_t E = cfg_.n_embd;
  const int K = cfg_.n_expert_used;
  const int64_t F = cfg_.n_ff_exp;

  for (int i = 0; i < n; ++i) {
    ops::rms_norm(h_.data() + sz(i) * sz(E), L.ffn_norm.data, xn_.data() + sz(i) * sz(E), E, cfg_.rms_eps);
  }
  if (observer_) observer_(il, "ffn_norm", xn_.data(), n, E);
  if (trunk) experts_->on_router_input(il, xn_.data(), n);

  if (cfg_.moe && !L.router.present()) {  // a dense lead layer of a MoE model: resident, not routed
    dense_lead_ffn(L, il, n);
    return;
  }

  // Routing.
  ensure(sel_ids_, sz(n) * sz(K));
  ensure(sel_w_, sz(n) * sz(K));
  if (L.router.present()) {
    ensure(router_logits_, sz(n) * sz(cfg_.n_expert));
    if (matmul_observer_) observe(il, Product::router, -1, xn_.data(), n, E);
    matmul(L.router, xn_.data(), n, E, router_logits_.data(), cfg_.n_expert, pool_, acts_);
    if (routing_observer_ && trunk) {  // the observer sees the logits (route_layer overwrites them)
      raw_logits_.assign(router_logits_.begin(), router_logits_.begin() + static_cast<ptrdiff_t>(sz(n) * sz(cfg_.n_expert)));
      if (L.router_bias.present()) {
        for (int i = 0; i < n; ++i) {
          for (int e = 0; e < cfg_.n_expert; ++e) raw_logits_[sz(i) * sz(cfg_.n_expert) + sz(e)] += L.router_bias.data[e];
        }
      }
    }
    route_layer(router_params(cfg_), L, router_logits_.data(), n, sel_ids_.data(), sel_w_.data());
    if (routing_observer_ && trunk) {
      routing_observer_(il, n, sel_ids_.data(), sel_w_.data(), K, raw_logits_.data(), cfg_.n_expert);
    }
  } else {
    for (int i = 0; i < n; ++i) {
      sel_ids_[sz(i)] = 0;
      sel_w_[sz(i)] = 1.0f;
    }
  }

  // Group (token, slot) pairs by expert; experts listed in order of first use.
  std::vector<int32_t> uniq;
  std::vector<std::vector<int32_t>> members;  // per unique expert: indices i*K + slot
  {
    std::vector<int32_t> index_of(sz(cfg_.n_expert), -1);
    for (int i = 0; i < n; ++i) {
      for (int s = 0; s < K; ++s) {
        const int32_t e = sel_ids_[sz(i) * sz(K) + sz(s)];
        if (index_of[sz(e)] < 0) {
          index_of[sz(e)] = static_cast<int32_t>(uniq.size());
          uniq.push_back(e);
          members.emplace_back();
        }
        members[sz(index_of[sz(e)])].push_back(i * K + s);
      }
    }
  }

  ensure(expert_out_, sz(n) * sz(K) * sz(E));
  auto run_expert = [&](size_t ui, const ExpertView& ev) {
    const std::vector<int32_t>& mem = members[ui];
    const int64_t m = static_cast<int64_t>(mem.size());
    ensure(ex_in_, sz(m) * sz(E));
    ensure(ex_g_, sz(m) * sz(F));
    ensure(ex_u_, sz(m) * sz(F));
    ensure(ex_y_, sz(m) * sz(E));
    for (int64_t r = 0; r < m; ++r) {
      std::memcpy(ex_in_.data() + sz(r) * sz(E), xn_.data() + sz(mem[sz(r)] / K) * sz(E), sz(E) * sizeof(float));
    }
    const int expert = cfg_.moe ? uniq[ui] : -1;  // a dense FFN is not an expert stack
    if (matmul_observer_) {
      observe(il, Product::ffn_gate, expert, ex_in_.data(), m, E);
      observe(il, Product::ffn_up, expert, ex_in_.data(), m, E);
    }
    quantize_acts(act_type(ev.gate.type), ex_in_.data(), m, E, E, acts_, &pool_);
    if (act_type(ev.up.type) == acts_.type) {  // gate and up in one pass of the threads
      const MatmulJob jobs[] = {{&ev.gate, ex_g_.data(), F}, {&ev.up, ex_u_.data(), F}};
      matmul_many(jobs, acts_, pool_);
    } else {
      matmul(ev.gate, acts_, ex_g_.data(), F, pool_);
      quantize_acts(act_type(ev.up.type), ex_in_.data(), m, E, E, acts_, &pool_);
      matmul(ev.up, acts_, ex_u_.data(), F, pool_);
    }
    if (L.gate_exps_b.present()) add_row_bias(ex_g_.data(), m, F, L.gate_exps_b.data + sz(expert) * sz(F));
    if (L.up_exps_b.present()) add_row_bias(ex_u_.data(), m, F, L.up_exps_b.data + sz(expert) * sz(F));
    if (cfg_.expert_act == ExpertAct::swiglu_oai) {
      for (int64_t j = 0; j < m * F; ++j) ex_g_[sz(j)] = ops::swiglu_oai(ex_g_[sz(j)], ex_u_[sz(j)]);
    } else {
      for (int64_t j = 0; j < m * F; ++j) ex_g_[sz(j)] = ops::silu(ex_g_[sz(j)]) * ex_u_[sz(j)];
    }
    if (matmul_observer_) observe(il, Product::ffn_down, expert, ex_g_.data(), m, F);
    matmul(ev.down, ex_g_.data(), m, F, ex_y_.data(), E, pool_, acts2_);
    if (L.down_exps_b.present()) add_row_bias(ex_y_.data(), m, E, L.down_exps_b.data + sz(expert) * sz(E));
    for (int64_t r = 0; r < m; ++r) {
      std::memcpy(expert_out_.data() + sz(mem[sz(r)]) * sz(E), ex_y_.data() + sz(r) * sz(E), sz(E) * sizeof(float));
    }
  };
  experts_->with_experts(il, uniq, run_expert);

  // Combine in router order: out = y0*w0 + y1*w1 + ... (fixed order, never completion order).
  for (int i = 0; i < n; ++i) {
    float* out = tmp_.data() + sz(i) * sz(E);
    for (int s = 0; s < K; ++s) {
      const float wgt = sel_w_[sz(i) * sz(K) + sz(s)];
      const float* y = expert_out_.data() + (sz(i) * sz(K) + sz(s)) * sz(E);
      if (s == 0) {
        for (int64_t j = 0; j < E; ++j) out[j] = y[j] * wgt;
      } else {
        for (int64_t j = 0; j < E; ++j) out[j] = out[j] + y[j] * wgt;
      }
    }
  }

  // Shared expert (qwen2moe): out += ffn_shexp(x) * sigmoid(w . x).
  if (L.shexp_gate.present()) {
    const int64_t FS = cfg_.n_ff_shexp;
    ensure(sh_g_, sz(n) * sz(FS));
    ensure(sh_u_, sz(n) * sz(FS));
    ensure(sh_y_, sz(n) * sz(E));
    ensure(sh_gate_, sz(n));
    if (matmul_observer_) {
      observe(il, Product::shexp_gate, -1, xn_.data(), n, E);
      observe(il, Product::shexp_up, -1, xn_.data(), n, E);
    }
    matmul(L.shexp_gate, xn_.data(), n, E, sh_g_.data(), FS, pool_, acts_);
    matmul(L.shexp_up, xn_.data(), n, E, sh_u_.data(), FS, pool_, acts_);
    for (int64_t j = 0; j < int64_t(n) * FS; ++j) sh_g_[sz(j)] = ops::silu(sh_g_[sz(j)]) * sh_u_[sz(j)];
    if (matmul_observer_) observe(il, Product::shexp_down, -1, sh_g_.data(), n, FS);
    matmul(L.shexp_down, sh_g_.data(), n, FS, sh_y_.data(), E, pool_, acts2_);
    if (L.shexp_gate_inp.present()) {
      if (matmul_observer_) observe(il, Product::shexp_gate_inp, -1, xn_.data(), n, E);
      matmul(L.shexp_gate_inp, xn_.data(), n, E, sh_gate_.data(), 1, pool_, acts_);
      for (int i = 0; i < n; ++i) {
        const float g = sh_gate_[sz(i)];
        // sigmoid, computed as llama.cpp does for each architecture
        sh_gate_[sz(i)] = cfg_.arch == Arch::qwen35moe || cfg_.arch == Arch::qwen3next ? ops::sigmoid(g) : ops::silu(g) / g;
      }
    }
    for (int i = 0; i < n; ++i) {
      const float g = L.shexp_gate_inp.present() ? sh_gate_[sz(i)] : 1.0f;
      float* out = tmp_.data() + sz(i) * sz(E);
      const float* y = sh_y_.data() + sz(i) * sz(E);
      for (int64_t j = 0; j < E; ++j) out[j] = out[j] + y[j] * g;
    }
  }
  if (observer_) observer_(il, "ffn_moe_out", tmp_.data(), n, E);

  for (int i = 0; i < n; ++i) {
    float* hr = h_.data() + sz(i) * sz(E);
    const float* t = tmp_.data() + sz(i) * sz(E);
    for (int64_t j = 0; j < E; ++j) hr[j] = t[j] + hr[j];
  }
}

}  // namespace les
