#include "les/model/attention_core.h"

#include <algorithm>
#include <vector>

#include "les/model/ops.h"
#include "les/quant/kernels.h"

namespace les {

void causal_attention(const AttentionShape& s, const float* q, int64_t q_stride, const float* k_cache,
                      const float* v_cache, int n, int pos0, float* out, ThreadPool& pool) {
  const int hd = s.head_dim_k, hdv = s.head_dim_v;
  const int64_t nk = int64_t(s.n_head_kv) * hd, nv = int64_t(s.n_head_kv) * hdv;
  const int group = s.n_head / s.n_head_kv;
  const int64_t n_pairs = static_cast<int64_t>(n) * s.n_head;
  const int n_kv_max = pos0 + n;
  auto sz = [](int64_t x) { return static_cast<size_t>(x); };
  const KernelTable& kt = kernels();
  pool.parallel_for(n_pairs, 1, [&](int, int64_t b, int64_t e) {
    std::vector<float> sc(sz(n_kv_max));
    for (int64_t pidx = b; pidx < e; ++pidx) {
      const int i = static_cast<int>(pidx / s.n_head);
      const int h = static_cast<int>(pidx % s.n_head);
      const int g = h / group;
      const int pos = pos0 + i;
      const int first = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;  // first visible position
      const int n_kv = pos + 1 - first;
      const float* qv = q + sz(i) * sz(q_stride) + sz(h) * sz(hd);
      // the scores: the keys (rows nk floats apart) times q, by the ISA's F32 product
      gemm_rows(kt, Type::F32, hd, k_cache + sz(first) * sz(nk) + sz(g) * sz(hd), sz(nk) * sizeof(float), n_kv, qv,
                sz(hd) * sizeof(float), 1, sc.data(), n_kv);
      for (int j = 0; j < n_kv; ++j) sc[sz(j)] *= s.scale;
      if (s.sinks) {
        ops::softmax_with_sink(sc.data(), n_kv, s.sinks[h]);
      } else {
        ops::softmax(sc.data(), n_kv);
      }
      float* o = out + sz(i) * sz(s.n_head) * sz(hdv) + sz(h) * sz(hdv);
      const float* v0 = v_cache + sz(first) * sz(nv) + sz(g) * sz(hdv);
      // o[d] = sum over j in order of p_j * v_j[d], 16 dimensions at a time held in registers
      // across the positions (not loaded and stored once per position)
      int d0 = 0;
      for (; d0 + 16 <= hdv; d0 += 16) {
        float acc[16] = {};
        for (int j = 0; j < n_kv; ++j) {
          const float* vv = v0 + sz(j) * sz(nv) + sz(d0);
          const float p = sc[sz(j)];
          for (int k = 0; k < 16; ++k) acc[k] += p * vv[k];
        }
        for (int k = 0; k < 16; ++k) o[d0 + k] = acc[k];
      }
      for (int d = d0; d < hdv; ++d) {
        float acc = 0.0f;
        for (int j = 0; j < n_kv; ++j) acc += sc[sz(j)] * v0[sz(j) * sz(nv) + sz(d)];
        o[d] = acc;
      }
    }
  });
}

}  // namespace les
