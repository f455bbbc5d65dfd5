#include "les/model/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "les/model/ops.h"
#include "les/quant/kernels.h"
#include "les/model/work_buffers.h"
#include "les/util/error.h"

namespace les {

namespace {


// Dot product of n floats in 8 independent lanes (vectorisable without reassociation flags).
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

}  // namespace

// --- RecurrentState ------------------------------------------------------------------------------

RecurrentState::RecurrentState(const ModelConfig& c) {
  const int n_rec = c.n_recurrent();
  conv_per_layer_ = sz(c.ssm_conv_dim()) * sz(c.ssm_d_conv - 1);
  ssm_per_layer_ = sz(c.ssm_n_v_heads) * sz(c.ssm_d_state) * sz(c.ssm_d_state);
  conv_.assign(conv_per_layer_ * sz(n_rec), 0.0f);
  conv_snap_.assign(conv_.size(), 0.0f);
  ssm_[0].assign(ssm_per_layer_ * sz(n_rec), 0.0f);
  ssm_[1].assign(ssm_[0].size(), 0.0f);
  first_.assign(sz(n_rec), 0);
}

void RecurrentState::reset() {
  std::fill(conv_.begin(), conv_.end(), 0.0f);
  std::fill(conv_snap_.begin(), conv_snap_.end(), 0.0f);
  std::fill(ssm_[0].begin(), ssm_[0].end(), 0.0f);
  std::fill(ssm_[1].begin(), ssm_[1].end(), 0.0f);
  std::fill(first_.begin(), first_.end(), 0);
  cur_ = src_ = 0;
  snap_pos_ = 0;
}

void RecurrentState::begin_eval(int pos) {
  // Layers whose first token never came (an evaluation that failed part-way) keep the snapshot.
  for (size_t r = 0; r < first_.size(); ++r) {
    if (first_[r]) std::memcpy(ssm_[cur_].data() + r * ssm_per_layer_, ssm_[src_].data() + r * ssm_per_layer_,
                               ssm_per_layer_ * sizeof(float));
  }
  std::memcpy(conv_snap_.data(), conv_.data(), conv_.size() * sizeof(float));
  src_ = cur_;
  cur_ = 1 - cur_;
  std::fill(first_.begin(), first_.end(), 1);
  snap_pos_ = pos;
}

void RecurrentState::restore_snapshot() {
  std::memcpy(conv_.data(), conv_snap_.data(), conv_.size() * sizeof(float));
  cur_ = src_;
  std::fill(first_.begin(), first_.end(), 0);
}

const float* RecurrentState::ssm_read(int r) const {
  const int b = first_[sz(r)] ? src_ : cur_;
  return ssm_[b].data() + sz(r) * ssm_per_layer_;
}

float* RecurrentState::ssm_write(int r) { return ssm_[cur_].data() + sz(r) * ssm_per_layer_; }

uint64_t RecurrentState::bytes() const {
  return (conv_.size() + conv_snap_.size() + ssm_[0].size() + ssm_[1].size()) * sizeof(float);
}

uint64_t RecurrentState::bytes_for(const ModelConfig& c) {
  const uint64_t conv = uint64_t(c.ssm_conv_dim()) * uint64_t(c.ssm_d_conv - 1);
  const uint64_t ssm = uint64_t(c.ssm_n_v_heads) * uint64_t(c.ssm_d_state) * uint64_t(c.ssm_d_state);
  return 2 * (conv + ssm) * uint64_t(c.n_recurrent()) * sizeof(float);  // state + snapshot
}

// --- DeltaNetMixer -------------------------------------------------------------------------------

uint64_t DeltaNetMixer::bytes() const {
  return (mixed_.size() + y_.size() + z_.size() + beta_.size() + g_.size() + o_.size() + fused_.size()) * sizeof(float) +
         acts_.buf.size();
}

void DeltaNetMixer::delta_rule_chunked(int64_t h, int n, const float* m_in, float* m_out) {
  // Per chunk of L tokens, with G_t the inclusive cumulative log-decay, Q = q / sqrt(S), K = k,
  // M the state entering the chunk ([key i][value j]; stored transposed, Mt[j][i]):
  //   A[t][s] = beta_t (K_t . K_s) exp(G_t - G_s) for s < t
  //   (I + A) U = diag(beta) V,  (I + A) W = diag(beta exp(G)) K      (forward substitution)
  //   V' = U - W M
  //   O_t = exp(G_t) Q_t M + sum_{s <= t} (Q_t . K_s) exp(G_t - G_s) V'_s
  //   M <- exp(G_L) M + sum_s exp(G_L - G_s) K_s V'_s^T
  constexpr int C = 64;
  const int64_t S = c_.ssm_d_state, nv = c_.ssm_n_v_heads;
  const int64_t kd = c_.ssm_key_dim(), vd = c_.ssm_value_dim(), cd = c_.ssm_conv_dim();
  const int64_t qk = c_.ssm_qk_head(h);
  const float inv_sqrt_s = 1.0f / std::sqrt(static_cast<float>(S));
  std::vector<float> G(C), A(sz(C) * C), U(sz(C) * sz(S)), W(sz(C) * sz(S)), Q(sz(C) * sz(S)), P(sz(C) * sz(S));
  float* Mt = m_out;
  if (Mt != m_in) std::memcpy(Mt, m_in, sz(S) * sz(S) * sizeof(float));
  for (int c0 = 0; c0 < n; c0 += C) {
    const int L = std::min(C, n - c0);
    auto Krow = [&](int t) { return y_.data() + sz(c0 + t) * sz(cd) + sz(kd) + sz(qk) * sz(S); };
    auto Vrow = [&](int t) { return y_.data() + sz(c0 + t) * sz(cd) + sz(2 * kd) + sz(h) * sz(S); };
    float acc = 0.0f;
    for (int t = 0; t < L; ++t) {
      acc += g_[sz(c0 + t) * sz(nv) + sz(h)];
      G[sz(t)] = acc;
      const float* q = y_.data() + sz(c0 + t) * sz(cd) + sz(qk) * sz(S);
      for (int64_t i = 0; i < S; ++i) Q[sz(t) * sz(S) + sz(i)] = q[i] * inv_sqrt_s;
    }
    // A, then U and W by forward substitution (row t uses rows s < t).
    for (int t = 0; t < L; ++t) {
      const float beta = beta_[sz(c0 + t) * sz(nv) + sz(h)];
      for (int s = 0; s < t; ++s) A[sz(t) * C + sz(s)] = beta * dot(Krow(t), Krow(s), S) * std::exp(G[sz(t)] - G[sz(s)]);
      float* u = U.data() + sz(t) * sz(S);
      float* w = W.data() + sz(t) * sz(S);
      const float* v = Vrow(t);
      const float* k = Krow(t);
      const float bw = beta * std::exp(G[sz(t)]);
      for (int64_t i = 0; i < S; ++i) {
        u[i] = beta * v[i];
        w[i] = bw * k[i];
      }
      for (int s = 0; s < t; ++s) {
        const float a = A[sz(t) * C + sz(s)];
        const float* us = U.data() + sz(s) * sz(S);
        const float* ws = W.data() + sz(s) * sz(S);
        for (int64_t i = 0; i < S; ++i) {
          u[i] -= a * us[i];
          w[i] -= a * ws[i];
        }
      }
    }
    // V' = U - W M (into U), and the inter-chunk output part P_t = exp(G_t) Q_t M.
    for (int t = 0; t < L; ++t) {
      float* u = U.data() + sz(t) * sz(S);
      const float* w = W.data() + sz(t) * sz(S);
      const float* q = Q.data() + sz(t) * sz(S);
      float* p = P.data() + sz(t) * sz(S);
      const float eg = std::exp(G[sz(t)]);
      for (int64_t j = 0; j < S; ++j) {
        const float* mj = Mt + sz(j) * sz(S);
        u[j] -= dot(w, mj, S);
        p[j] = eg * dot(q, mj, S);
      }
    }
    // O_t = P_t + sum_{s <= t} (Q_t . K_s) exp(G_t - G_s) V'_s.
    for (int t = 0; t < L; ++t) {
      float* o = o_.data() + sz(c0 + t) * sz(vd) + sz(h) * sz(S);
      const float* p = P.data() + sz(t) * sz(S);
      for (int64_t j = 0; j < S; ++j) o[j] = p[j];
      for (int s = 0; s <= t; ++s) {
        const float a = dot(Q.data() + sz(t) * sz(S), Krow(s), S) * std::exp(G[sz(t)] - G[sz(s)]);
        const float* vs = U.data() + sz(s) * sz(S);
        for (int64_t j = 0; j < S; ++j) o[j] += a * vs[j];
      }
    }
    // M <- exp(G_L) M + sum_s exp(G_L - G_s) K_s V'_s^T, i.e. Mt[j][i] += V'_s[j] * (exp(..) K_s[i]).
    const float gl = G[sz(L - 1)];
    const float el = std::exp(gl);
    for (int s = 0; s < L; ++s) {
      const float e = std::exp(gl - G[sz(s)]);
      float* ks = W.data() + sz(s) * sz(S);  // W is no longer needed: scaled keys
      const float* k = Krow(s);
      for (int64_t i = 0; i < S; ++i) ks[i] = e * k[i];
    }
    for (int64_t j = 0; j < S; ++j) {
      float* mj = Mt + sz(j) * sz(S);
      for (int64_t i = 0; i < S; ++i) mj[i] *= el;
      for (int s = 0; s < L; ++s) {
        const float vj = U[sz(s) * sz(S) + sz(j)];
        const float* ks = W.data() + sz(s) * sz(S);
        for (int64_t i = 0; i < S; ++i) mj[i] += vj * ks[i];
      }
    }
  }
}

uint64_t DeltaNetMixer::floats_per_token(const ModelConfig& c) {
  const uint64_t fused = c.ssm_v_grouped ? uint64_t(c.ssm_conv_dim()) + uint64_t(c.ssm_value_dim()) : 0;  // ssm_in
  return 2 * uint64_t(c.ssm_conv_dim()) + 2 * uint64_t(c.ssm_value_dim()) + 2 * uint64_t(c.ssm_n_v_heads) + fused;
}

void DeltaNetMixer::forward(const LayerWeights& L, RecurrentState& st, int r, const float* x, int n, float* out,
                            ThreadPool& pool, const ProductTap* tap) {
  const int64_t E = c_.n_embd;
  const int64_t S = c_.ssm_d_state, nk = c_.ssm_n_k_heads, nv = c_.ssm_n_v_heads;
  const int64_t kd = c_.ssm_key_dim(), vd = c_.ssm_value_dim(), cd = c_.ssm_conv_dim();
  const int64_t K = c_.ssm_d_conv;
  const float eps = c_.rms_eps;
  if (mixed_.size() < sz(n) * sz(cd)) mixed_.resize(sz(n) * sz(cd));
  if (y_.size() < sz(n) * sz(cd)) y_.resize(sz(n) * sz(cd));
  if (z_.size() < sz(n) * sz(vd)) z_.resize(sz(n) * sz(vd));
  if (o_.size() < sz(n) * sz(vd)) o_.resize(sz(n) * sz(vd));
  if (beta_.size() < sz(n) * sz(nv)) beta_.resize(sz(n) * sz(nv));
  if (g_.size() < sz(n) * sz(nv)) g_.resize(sz(n) * sz(nv));

  // 1. Projections (the input is quantized once per activation type).
  acts_.n_tok = -1;
  auto project = [&](Product p, const Matrix& W, float* y, int64_t width) {
    if (tap) (*tap)(p, x, n, E);
    if (acts_.type != act_type(W.type) || acts_.n_tok != n || acts_.n_in != E) {
      quantize_acts(act_type(W.type), x, n, E, E, acts_, &pool);
    }
    matmul(W, acts_, y, width, pool);
  };
  // The fused forms (qwen3next) are one product each, whose rows are then gathered per q/k head
  // group (rows of a product are independent: the same values as separate products).
  const int64_t rg = nv / nk;  // v heads per q/k head group
  if (L.ssm_in.present()) {
    const int64_t G = 2 * S + 2 * rg * S;  // rows per group: q_g, k_g, v_g, z_g
    ensure(fused_, sz(n) * sz(nk * G));
    project(Product::ssm_qkv, L.ssm_in, fused_.data(), nk * G);
    for (int t = 0; t < n; ++t) {
      const float* in = fused_.data() + sz(t) * sz(nk * G);
      float* qkv = mixed_.data() + sz(t) * sz(cd);
      float* z = z_.data() + sz(t) * sz(vd);
      for (int64_t g = 0; g < nk; ++g) {
        const float* src = in + sz(g) * sz(G);
        std::memcpy(qkv + sz(g * S), src, sz(S) * sizeof(float));
        std::memcpy(qkv + sz(kd + g * S), src + S, sz(S) * sizeof(float));
        std::memcpy(qkv + sz(2 * kd + g * rg * S), src + 2 * S, sz(rg * S) * sizeof(float));
        std::memcpy(z + sz(g * rg * S), src + 2 * S + rg * S, sz(rg * S) * sizeof(float));
      }
    }
  } else {
    project(Product::ssm_qkv, L.ssm_qkv, mixed_.data(), cd);
    project(Product::ssm_gate, L.ssm_z, z_.data(), vd);
  }
  if (L.ssm_ba.present()) {
    ensure(fused_, sz(n) * sz(2 * nv));
    project(Product::ssm_beta, L.ssm_ba, fused_.data(), 2 * nv);
    for (int t = 0; t < n; ++t) {
      const float* ba = fused_.data() + sz(t) * sz(2 * nv);
      for (int64_t h = 0; h < nv; ++h) {
        const int64_t g = h / rg, j = h % rg;
        beta_[sz(t) * sz(nv) + sz(h)] = ba[g * 2 * rg + j];
        g_[sz(t) * sz(nv) + sz(h)] = ba[g * 2 * rg + rg + j];
      }
    }
  } else {
    project(Product::ssm_beta, L.ssm_beta, beta_.data(), nv);
    project(Product::ssm_alpha, L.ssm_alpha, g_.data(), nv);
  }

  // 2. Gates: beta = sigmoid(b), g = softplus(a + dt_bias) * A.
  for (int64_t i = 0; i < int64_t(n) * nv; ++i) {
    const int64_t h = i % nv;
    beta_[sz(i)] = ops::sigmoid(beta_[sz(i)]);
    g_[sz(i)] = softplus(g_[sz(i)] + L.ssm_dt_bias.data[h]) * L.ssm_a.data[h];
  }

  // 3. Causal depthwise conv with the layer's conv state, then silu. Channel c at token t sees
  //    [x(t-K+1) .. x(t)], tap K-1 on x(t); x(tau < 0) comes from the state (oldest first).
  float* cstate = st.conv(r);
  const float* w = L.ssm_conv1d.data;  // [cd][K]
  pool.parallel_for(cd, 256, [&](int, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float* sc = cstate + sz(c) * sz(K - 1);
      const float* wc = w + sz(c) * sz(K);
      auto at = [&](int64_t tau) { return tau < 0 ? sc[sz(tau + K - 1)] : mixed_[sz(tau) * sz(cd) + sz(c)]; };
      for (int64_t t = 0; t < n; ++t) {
        float sum = 0.0f;
        for (int64_t k = 0; k < K; ++k) sum += at(t - K + 1 + k) * wc[k];
        y_[sz(t) * sz(cd) + sz(c)] = ops::silu(sum);
      }
      float last[64];
      for (int64_t j = 0; j < K - 1; ++j) last[j] = at(n - (K - 1) + j);
      for (int64_t j = 0; j < K - 1; ++j) sc[j] = last[j];
    }
  });

  // 4. L2-normalise q and k per head (ggml: rms_norm with eps / S, then times 1 / sqrt(S)).
  const float inv_sqrt_s = 1.0f / std::sqrt(static_cast<float>(S));
  for (int t = 0; t < n; ++t) {
    float* row = y_.data() + sz(t) * sz(cd);
    for (int64_t h = 0; h < 2 * nk; ++h) {
      float* v = row + sz(h) * sz(S);
      ops::rms_norm(v, nullptr, v, S, eps / static_cast<float>(S));
      for (int64_t i = 0; i < S; ++i) v[i] *= inv_sqrt_s;
    }
  }

  // 5. Delta rule, one v head per task, token by token.
  const float* m_in = st.ssm_read(r);
  float* m_out = st.ssm_write(r);
  pool.parallel_for(nv, 1, [&](int, int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      if (chunked_ && n > 1) {
        delta_rule_chunked(h, n, m_in + sz(h) * sz(S) * sz(S), m_out + sz(h) * sz(S) * sz(S));
        continue;
      }
      const float* src = m_in + sz(h) * sz(S) * sz(S);
      float* M = m_out + sz(h) * sz(S) * sz(S);  // [value j][key i]
      const int64_t qk = c_.ssm_qk_head(h);
      for (int t = 0; t < n; ++t) {
        const float* row = y_.data() + sz(t) * sz(cd);
        const float* q = row + sz(qk) * sz(S);
        const float* k = row + sz(kd) + sz(qk) * sz(S);
        const float* v = row + sz(2 * kd) + sz(h) * sz(S);
        const float beta = beta_[sz(t) * sz(nv) + sz(h)];
        const float decay = std::exp(g_[sz(t) * sz(nv) + sz(h)]);
        const float* from = t == 0 ? src : M;
        float* o = o_.data() + sz(t) * sz(vd) + sz(h) * sz(S);
        // Row j of M (value j, all keys) depends on delta_j only: decay, delta, update and read
        // out row by row while it is in L1. Per element the operations are ggml's, in its order.
        for (int64_t j = 0; j < S; ++j) {
          const float* fj = from + sz(j) * sz(S);
          float* mj = M + sz(j) * sz(S);
          for (int64_t i = 0; i < S; ++i) mj[i] = fj[i] * decay;
          const float dj = (v[j] - dot(mj, k, S)) * beta;
          for (int64_t i = 0; i < S; ++i) mj[i] += k[i] * dj;
          o[j] = dot(mj, q, S) * inv_sqrt_s;
        }
      }
    }
  });
  st.ssm_written(r);

  // 6. Gated RMSNorm per v head: RMSNorm(o_h) * ssm_norm * silu(z_h).
  for (int t = 0; t < n; ++t) {
    for (int64_t h = 0; h < nv; ++h) {
      float* o = o_.data() + sz(t) * sz(vd) + sz(h) * sz(S);
      const float* z = z_.data() + sz(t) * sz(vd) + sz(h) * sz(S);
      ops::rms_norm(o, L.ssm_norm.data, o, S, eps);
      for (int64_t j = 0; j < S; ++j) o[j] = o[j] * ops::silu(z[j]);
    }
  }

  // 7. Output projection.
  if (tap) (*tap)(Product::ssm_out, o_.data(), n, vd);
  matmul(L.ssm_out, o_.data(), n, vd, out, E, pool, acts_);
}

}  // namespace les
