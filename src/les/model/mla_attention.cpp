#include "les/model/mla_attention.h"

#include <algorithm>
#include <cstring>

#include "les/model/ops.h"
#include "les/model/work_buffers.h"
#include "les/quant/kernels.h"

namespace les {

namespace mla_detail {

constexpr int64_t kRowBlock = 64;     // weight rows of a per-head product per task
constexpr int kHeadBlock = 4;         // query heads per attention task (they read the cache rows once)
constexpr int kLatentChunk = 64;      // latent dims accumulated at a time (kept in L1 for the block)

// The products of a 3-D weight W [n_head][rows][n_in] with per-head activations a (row
// i * n_head + h: token i, head h): y[i * y_tok + h * y_head + r] = W.row(h * rows + r) . a.row(..)
// for i < n, h < n_head, r < rows. Each output is one vec_dot, as in matmul.
void per_head_product(const Matrix& W, int64_t rows, int n_head, const QuantizedActs& a, int n, float* y,
                      int64_t y_head, int64_t y_tok, ThreadPool& pool) {
  const KernelTable& kt = kernels();
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  pool.parallel_for(int64_t(n_head) * blocks, 1, [&](int, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t h = t / blocks, r0 = (t % blocks) * kRowBlock, r1 = std::min(rows, r0 + kRowBlock);
      gemm_rows(kt, W.type, W.n_in, W.row(h * rows + r0), W.row_bytes, r1 - r0, a.row(h),
                static_cast<size_t>(n_head) * a.row_bytes, n, y + h * y_head + r0, y_tok);
    }
  });
}

// Causal attention of n query rows (positions pos0..) with n_head heads of width D over the cache
// rows [pos0 + n][D] (one shared KV head): lat[i][h][0..R) = sum over j <= pos0 + i of
// softmax_j(scale * q[i][h] . row_j) * row_j[0..R). Scores by the F32 product kernel, then for
// every output element one sum over j in order: independent of the head blocking and the threads.
void attend(const float* q, const float* cache, int64_t D, int64_t R, int n_head, int n, int pos0, float scale,
            float* lat, ThreadPool& pool) {
  const KernelTable& kt = kernels();
  const int64_t blocks = (n_head + kHeadBlock - 1) / kHeadBlock;
  pool.parallel_for(int64_t(n) * blocks, 1, [&](int, int64_t b, int64_t e) {
    std::vector<float> sc;
    for (int64_t t = b; t < e; ++t) {
      const int64_t i = t / blocks, h0 = (t % blocks) * kHeadBlock;
      const int nh = static_cast<int>(std::min<int64_t>(kHeadBlock, n_head - h0));
      const int n_kv = pos0 + static_cast<int>(i) + 1;
      sc.resize(sz(nh) * sz(n_kv));
      const float* qi = q + sz(i * n_head + h0) * sz(D);
      gemm_rows(kt, Type::F32, D, cache, sz(D) * sizeof(float), n_kv, qi, sz(D) * sizeof(float), nh, sc.data(), n_kv);
      for (int c = 0; c < nh; ++c) {
        float* s = sc.data() + sz(c) * sz(n_kv);
        for (int j = 0; j < n_kv; ++j) s[j] *= scale;
        ops::softmax(s, n_kv);
      }
      float* out = lat + sz(i * n_head + h0) * sz(R);
      for (int64_t d0 = 0; d0 < R; d0 += kLatentChunk) {
        const int w = static_cast<int>(std::min<int64_t>(kLatentChunk, R - d0));
        float acc[kHeadBlock][kLatentChunk] = {};
        for (int j = 0; j < n_kv; ++j) {
          const float* v = cache + sz(j) * sz(D) + sz(d0);
          for (int c = 0; c < nh; ++c) {
            const float p = sc[sz(c) * sz(n_kv) + sz(j)];
            for (int d = 0; d < w; ++d) acc[c][d] += p * v[d];
          }
        }
        for (int c = 0; c < nh; ++c) std::memcpy(out + sz(c) * sz(R) + sz(d0), acc[c], sz(w) * sizeof(float));
      }
    }
  });
}

}  // namespace mla_detail

uint64_t MlaAttention::bytes() const {
  return (qa_.size() + q_.size() + kv_.size() + qabs_.size() + lat_.size() + o_.size() + rope_.size()) * sizeof(float) +
         acts_.buf.size() + acts2_.buf.size();
}

void MlaAttention::forward(const LayerWeights& L, const float* x, int n, int pos0, float* cache, float* out,
                           ThreadPool& pool, const ProductTap* tap) {
  using namespace mla_detail;
  const int64_t E = c_.n_embd, R = c_.n_lora_kv, rope = c_.n_rot, dk = c_.head_dim_k_mla, dv = c_.head_dim_v_mla;
  const int64_t nope = dk - rope, D = R + rope;
  const int H = c_.n_head;
  ensure(q_, sz(n) * sz(H) * sz(dk));
  ensure(kv_, sz(n) * sz(D));
  ensure(qabs_, sz(n) * sz(H) * sz(D));
  ensure(lat_, sz(n) * sz(H) * sz(R));
  ensure(o_, sz(n) * sz(H) * sz(dv));
  ensure(rope_, sz(rope));

  // The query (or its LoRA down-projection) and the compressed kv take the same input.
  acts_.n_tok = -1;
  auto project = [&](Product p, const Matrix& W, float* y) {
    if (tap) (*tap)(p, x, n, E);
    if (acts_.type != act_type(W.type) || acts_.n_tok != n || acts_.n_in != E) {
      quantize_acts(act_type(W.type), x, n, E, E, acts_, &pool);
    }
    matmul(W, acts_, y, W.n_out, pool);
  };
  if (L.wq_a.present()) {
    const int64_t Q = c_.n_lora_q;
    ensure(qa_, sz(n) * sz(Q));
    project(Product::attn_q_a, L.wq_a, qa_.data());
    project(Product::attn_kv_a, L.wkv_a, kv_.data());
    for (int i = 0; i < n; ++i) {
      float* r = qa_.data() + sz(i) * sz(Q);
      ops::rms_norm(r, L.q_a_norm.data, r, Q, c_.rms_eps);
    }
    if (tap) (*tap)(Product::attn_q_b, qa_.data(), n, Q);
    matmul(L.wq_b, qa_.data(), n, Q, q_.data(), H * dk, pool, acts2_);
  } else {
    project(Product::attn_q, L.wq, q_.data());
    project(Product::attn_kv_a, L.wkv_a, kv_.data());
  }

  // RoPE on each head's rope part and on the shared key part; the cache row [latent | k_rope].
  ops::RopeParams rp;
  rp.n_rot = static_cast<int>(rope);
  rp.type = c_.rope_type;
  rp.freq_base = c_.rope_freq_base;
  rp.freq_scale = c_.rope_freq_scale;
  ops::set_yarn(rp, c_);
  for (int i = 0; i < n; ++i) {
    ops::rope_cache(rp, pos0 + i, rope_.data());
    const float* kv = kv_.data() + sz(i) * sz(D);
    float* row = cache + sz(pos0 + i) * sz(D);
    ops::rms_norm(kv, L.kv_a_norm.data, row, R, c_.rms_eps);
    std::memcpy(row + R, kv + R, sz(rope) * sizeof(float));
    ops::rope_apply(rp, rope_.data(), row + R);
    for (int h = 0; h < H; ++h) {
      float* qr = q_.data() + sz(int64_t(i) * H + h) * sz(dk) + sz(nope);
      ops::rope_apply(rp, rope_.data(), qr);
      std::memcpy(qabs_.data() + sz(int64_t(i) * H + h) * sz(D) + sz(R), qr, sz(rope) * sizeof(float));
    }
  }

  // Absorbed query: attn_k_b[h] . q_nope_h in front of the rope part.
  quantize_acts(act_type(L.wk_b.type), q_.data(), int64_t(n) * H, nope, dk, acts2_, &pool);
  per_head_product(L.wk_b, R, H, acts2_, n, qabs_.data(), D, H * D, pool);

  attend(qabs_.data(), cache, D, R, H, n, pos0, c_.mla_kq_scale, lat_.data(), pool);

  // Back from the latent to each head's values, then the output projection.
  quantize_acts(act_type(L.wv_b.type), lat_.data(), int64_t(n) * H, R, R, acts2_, &pool);
  per_head_product(L.wv_b, dv, H, acts2_, n, o_.data(), dv, H * dv, pool);
  if (tap) (*tap)(Product::attn_output, o_.data(), n, H * dv);
  matmul(L.wo, o_.data(), n, H * dv, out, E, pool, acts_);
}

}  // namespace les
