#include "les/model/attention_core.h"

#include <vector>

#include "les/model/ops.h"

namespace les {

void causal_attention(const AttentionShape& s, const float* q, int64_t q_stride, const float* k_cache,
                      const float* v_cache, int n, int pos0, float* out, ThreadPool& pool) {
  const int hd = s.head_dim_k, hdv = s.head_dim_v;
  const int64_t nk = int64_t(s.n_head_kv) * hd, nv = int64_t(s.n_head_kv) * hdv;
  const int group = s.n_head / s.n_head_kv;
  const int64_t n_pairs = static_cast<int64_t>(n) * s.n_head;
  const int n_kv_max = pos0 + n;
  auto sz = [](int64_t x) { return static_cast<size_t>(x); };
  pool.parallel_for(n_pairs, 1, [&](int, int64_t b, int64_t e) {
    std::vector<float> sc(sz(n_kv_max));
    for (int64_t pidx = b; pidx < e; ++pidx) {
      const int i = static_cast<int>(pidx / s.n_head);
      const int h = static_cast<int>(pidx % s.n_head);
      const int g = h / group;
      const int n_kv = pos0 + i + 1;
      const float* qv = q + sz(i) * sz(q_stride) + sz(h) * sz(hd);
      for (int j = 0; j < n_kv; ++j) {
        const float* kv = k_cache + sz(j) * sz(nk) + sz(g) * sz(hd);
        float acc = 0.0f;
        for (int d = 0; d < hd; ++d) acc += kv[d] * qv[d];
        sc[sz(j)] = acc * s.scale;
      }
      ops::softmax(sc.data(), n_kv);
      float* o = out + sz(i) * sz(s.n_head) * sz(hdv) + sz(h) * sz(hdv);
      for (int d = 0; d < hdv; ++d) o[d] = 0.0f;
      for (int j = 0; j < n_kv; ++j) {
        const float* vv = v_cache + sz(j) * sz(nv) + sz(g) * sz(hdv);
        const float p = sc[sz(j)];
        for (int d = 0; d < hdv; ++d) o[d] += p * vv[d];
      }
    }
  });
}

}  // namespace les
