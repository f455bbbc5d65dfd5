#include "les/model/gated_attention.h"

#include <cmath>
#include <cstring>

#include "les/model/attention_core.h"
#include "les/model/ops.h"
#include "les/model/work_buffers.h"
#include "les/quant/kernels.h"

namespace les {

uint64_t GatedAttentionMixer::bytes() const {
  return (qg_.size() + q_.size() + k_.size() + v_.size() + att_.size() + rope_.size()) * sizeof(float) +
         acts_.buf.size();
}

void GatedAttentionMixer::forward(const LayerWeights& L, const float* x, int n, int pos0, KvRows& k_rows,
                                  KvRows& v_rows, int slot, float* out, ThreadPool& pool, const ProductTap* tap) {
  const int64_t E = c_.n_embd;
  const int hd = c_.head_dim_k, H = c_.n_head, Hkv = c_.n_head_kv;
  const int64_t nq = c_.n_q(), nk = c_.n_kv_k(), nv = c_.n_kv_v();
  ensure(qg_, sz(n) * sz(2 * nq));
  ensure(q_, sz(n) * sz(nq));
  ensure(k_, sz(n) * sz(nk));
  ensure(v_, sz(n) * sz(nv));
  ensure(att_, sz(n) * sz(nq));
  ensure(rope_, sz(c_.n_rot));

  acts_.n_tok = -1;
  auto project = [&](Product p, const Matrix& W, float* y, int64_t width) {
    if (tap) (*tap)(p, x, n, E);
    if (acts_.type != act_type(W.type) || acts_.n_tok != n || acts_.n_in != E) {
      quantize_acts(act_type(W.type), x, n, E, E, acts_, &pool);
    }
    matmul(W, acts_, y, width, pool);
  };
  project(Product::attn_q, L.wq, qg_.data(), 2 * nq);
  project(Product::attn_k, L.wk, k_.data(), nk);
  project(Product::attn_v, L.wv, v_.data(), nv);

  // Split [q_h | gate_h]; per-head q/k RMSNorm; RoPE.
  ops::RopeParams rp;
  rp.n_rot = c_.n_rot;
  rp.type = c_.rope_type;
  rp.freq_base = c_.rope_freq_base;
  rp.freq_scale = c_.rope_freq_scale;
  rp.sections = c_.rope_sections.data();
  ops::set_yarn(rp, c_);
  for (int i = 0; i < n; ++i) {
    ops::rope_cache(rp, pos0 + i, rope_.data());
    for (int h = 0; h < H; ++h) {
      const float* src = qg_.data() + sz(i) * sz(2 * nq) + sz(2 * h) * sz(hd);
      float* q = q_.data() + sz(i) * sz(nq) + sz(h) * sz(hd);
      ops::rms_norm(src, L.q_norm.data, q, hd, c_.rms_eps);
      ops::rope_apply(rp, rope_.data(), q);
    }
    for (int h = 0; h < Hkv; ++h) {
      float* k = k_.data() + sz(i) * sz(nk) + sz(h) * sz(hd);
      ops::rms_norm(k, L.k_norm.data, k, hd, c_.rms_eps);
      ops::rope_apply(rp, rope_.data(), k);
    }
  }

  k_rows.write(slot, pos0, k_.data(), n);
  v_rows.write(slot, pos0, v_.data(), n);

  const AttentionShape as{H, Hkv, hd, c_.head_dim_v, 1.0f / std::sqrt(static_cast<float>(hd))};
  causal_attention(as, q_.data(), nq, k_rows.view(slot), v_rows.view(slot), n, pos0, att_.data(), pool);

  // Output gate: a *= sigmoid(gate), gate_h laid out like a's head h.
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < H; ++h) {
      const float* gate = qg_.data() + sz(i) * sz(2 * nq) + sz(2 * h + 1) * sz(hd);
      float* a = att_.data() + sz(i) * sz(nq) + sz(h) * sz(hd);
      for (int d = 0; d < hd; ++d) a[d] = a[d] * ops::sigmoid(gate[d]);
    }
  }
  if (tap) (*tap)(Product::attn_output, att_.data(), n, nq);
  matmul(L.wo, att_.data(), n, nq, out, E, pool, acts_);
}

}  // namespace les
