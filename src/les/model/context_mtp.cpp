// The MTP (NextN) draft head on a Context: y = eh_proj . [RMSNorm(embed[x]) * enorm ;
// RMSNorm(h) * hnorm], then the MTP block (qwen35moe, qwen3next: gated attention; glm4moe: standard attention
// with biases; each with its own KV cache; then MoE + shared expert), then head_norm and the LM head.
#include <algorithm>
#include <cstring>

#include "les/model/context.h"
#include "les/model/ops.h"
#include "les/quant/kernels.h"
#include "les/model/work_buffers.h"
#include "les/util/error.h"

namespace les {

const float* Context::mtp_logits(int i) const {
  LES_ASSERT(i >= 0 && i < mtp_rows_);
  return mtp_logits_.data() + sz(i) * sz(cfg_.n_vocab);
}

const float* Context::mtp_hidden(int i) const {
  LES_ASSERT(i >= 0 && i < mtp_rows_);
  return mtp_hidden_.data() + sz(i) * sz(cfg_.n_embd);
}

void Context::mtp_rollback(int n) {
  if (n < 0 || n > mtp_n_past_) throw Error(strfmt("MTP rollback to %d is outside [0, %d]", n, mtp_n_past_));
  mtp_n_past_ = n;
}

void Context::mtp_eval(std::span<const int32_t> tokens, const float* hidden) {
  const MtpWeights& t = model_.weights().mtp;
  if (!t.present()) throw Error("mtp_eval: the model has no MTP (NextN) block");
  if (!t.runnable()) throw Error("mtp_eval: the MTP block has no routed experts");
  if (tokens.empty()) throw Error("mtp_eval: no tokens");
  check_token_ids(tokens);
  if (mtp_n_past_ + static_cast<int64_t>(tokens.size()) > n_ctx_) {
    throw Error(strfmt("MTP context is full: %d positions used + %zu new rows > context size %d", mtp_n_past_,
                       tokens.size(), n_ctx_));
  }
  const int64_t E = cfg_.n_embd, V = cfg_.n_vocab;
  const int n_total = static_cast<int>(tokens.size());
  // The input may be this context's own mtp_hidden() (a draft chain): copy it before writing.
  const std::vector<float> h_in(hidden, hidden + sz(n_total) * sz(E));
  mtp_rows_ = n_total;
  ensure(mtp_hidden_, sz(n_total) * sz(E));
  ensure(mtp_logits_, sz(n_total) * sz(V));
  const DequantizeFn deq = kernels().dequantize[static_cast<uint32_t>(t.embed.type)];
  LES_ASSERT(deq != nullptr);
  for (int b = 0; b < n_total; b += n_batch_) {
    const int n = std::min(n_batch_, n_total - b);
    ensure(h_, sz(n) * sz(E));
    ensure(xn_, sz(n) * sz(E));
    ensure(tmp_, sz(n) * sz(E));
    ensure(mtp_in_, sz(n) * sz(2 * E));
    // c = [RMSNorm(embed[x]) * enorm ; RMSNorm(h) * hnorm], then y = eh_proj . c.
    for (int i = 0; i < n; ++i) {
      float* c = mtp_in_.data() + sz(i) * sz(2 * E);
      deq(t.embed.row(tokens[sz(b + i)]), tmp_.data(), E);
      ops::rms_norm(tmp_.data(), t.enorm.data, c, E, cfg_.rms_eps);
      ops::rms_norm(h_in.data() + sz(b + i) * sz(E), t.hnorm.data, c + E, E, cfg_.rms_eps);
    }
    const int il = cfg_.n_layer;
    if (matmul_observer_) observe(il, Product::mtp_eh_proj, -1, mtp_in_.data(), n, 2 * E);
    matmul(t.eh_proj, mtp_in_.data(), n, 2 * E, h_.data(), E, pool_, acts_);
    if (cfg_.arch == Arch::qwen35moe || cfg_.arch == Arch::qwen3next) {
      hybrid_mixer(t.block, il, n, mtp_n_past_);
    } else {
      attention(t.block, il, n, mtp_n_past_);
    }
    ffn(t.block, il, n);
    mtp_n_past_ += n;
    float* hid = mtp_hidden_.data() + sz(b) * sz(E);
    for (int i = 0; i < n; ++i) {
      ops::rms_norm(h_.data() + sz(i) * sz(E), t.head_norm.data, hid + sz(i) * sz(E), E, cfg_.rms_eps);
    }
    if (matmul_observer_) matmul_observer_(product_names_->mtp_head, -1, hid, n, E);
    matmul(t.head, hid, n, E, mtp_logits_.data() + sz(b) * sz(V), V, pool_, acts_);
  }
}

}  // namespace les
