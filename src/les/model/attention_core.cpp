#include "les/model/attention_core.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "les/model/attention_kernels.h"
#include "les/model/ops.h"
#include "les/quant/kernels.h"

namespace les {

namespace attention_core_detail {

// One query token and KV head: its query heads converted to K's activation type, and where its
// visible positions lie.
struct TokenGroup {
  const uint8_t* qa;  // group * q_row_bytes
  int first, last;    // visible positions first .. last
};

constexpr int kVTile = 32;  // V rows converted to float at a time

// Piece c of a token's visible positions (those in [c * kAttnChunk, (c + 1) * kAttnChunk)), for
// the `group` query heads of KV head g: part[h] = {max, sum, o[hdv]} with p_j = exp(s_j - max),
// sum = sum of p_j, o = sum of p_j v_j (j in order).
void attention_piece(const AttentionShape& s, const KvView& k, const KvView& v, const TokenGroup& tg, int g, int c,
                     size_t q_row_bytes, float* part) {
  const KernelTable& kt = kernels();
  const AttnKernels& ak = attn_kernels();
  const int group = s.n_head / s.n_head_kv, hd = s.head_dim_k, hdv = s.head_dim_v;
  const int a = std::max(tg.first, c * kAttnChunk), b = std::min(tg.last + 1, (c + 1) * kAttnChunk);
  const int n_kv = b - a;
  thread_local std::vector<float> sc, vt;
  if (sc.size() < static_cast<size_t>(group) * kAttnChunk) sc.resize(static_cast<size_t>(group) * kAttnChunk);
  if (vt.size() < static_cast<size_t>(kVTile) * static_cast<size_t>(hdv)) vt.resize(static_cast<size_t>(kVTile) * static_cast<size_t>(hdv));
  gemm_rows(kt, k.type, hd, k.row(a) + static_cast<size_t>(g) * k.head_bytes, k.row_bytes, n_kv, tg.qa, q_row_bytes,
            group, sc.data(), kAttnChunk);
  const size_t part_stride = 2 + static_cast<size_t>(hdv);
  for (int h = 0; h < group; ++h) {
    float* x = sc.data() + static_cast<size_t>(h) * kAttnChunk;
    float* ph = part + static_cast<size_t>(h) * part_stride;
    // max of the scaled scores = the scaled max (scaling by a positive number keeps the order)
    const float m = ak.max_value(x, n_kv) * s.scale;
    ph[0] = m;
    ph[1] = ak.exp_sum(x, n_kv, s.scale, m);
    std::memset(ph + 2, 0, static_cast<size_t>(hdv) * sizeof(float));
  }
  const DequantizeFn to_float = kt.dequantize[static_cast<uint32_t>(v.type)];
  for (int t = 0; t < n_kv; t += kVTile) {
    const int tn = std::min(kVTile, n_kv - t);
    const float* rows;
    int64_t stride;
    if (v.type == Type::F32) {
      rows = reinterpret_cast<const float*>(v.row(a + t) + static_cast<size_t>(g) * v.head_bytes);
      stride = static_cast<int64_t>(v.row_bytes / sizeof(float));
    } else {
      const uint8_t* v0 = v.row(a + t) + static_cast<size_t>(g) * v.head_bytes;
      if (!ak.rows_to_float(v.type, v0, v.row_bytes, tn, hdv, vt.data())) {
        for (int j = 0; j < tn; ++j) {
          to_float(v0 + static_cast<size_t>(j) * v.row_bytes, vt.data() + static_cast<size_t>(j) * static_cast<size_t>(hdv), hdv);
        }
      }
      rows = vt.data();
      stride = hdv;
    }
    ak.pv_accumulate(sc.data() + t, kAttnChunk, group, rows, stride, tn, hdv, part + 2, static_cast<int64_t>(part_stride));
  }
}

// out[h] (the group's heads) from the pieces part[c][h] of one token and KV head, c in order.
void attention_combine(const AttentionShape& s, int g, int n_pieces, const float* parts, float* out) {
  const int group = s.n_head / s.n_head_kv, hdv = s.head_dim_v;
  const size_t part_stride = 2 + static_cast<size_t>(hdv);
  for (int hl = 0; hl < group; ++hl) {
    const int h = g * group + hl;
    float M = s.sinks ? s.sinks[h] : -INFINITY;
    for (int c = 0; c < n_pieces; ++c) M = std::max(M, parts[(static_cast<size_t>(c) * group + hl) * part_stride]);
    float L = s.sinks ? std::exp(s.sinks[h] - M) : 0.0f;
    float* o = out + static_cast<size_t>(h) * hdv;
    std::memset(o, 0, static_cast<size_t>(hdv) * sizeof(float));
    for (int c = 0; c < n_pieces; ++c) {
      const float* pc = parts + (static_cast<size_t>(c) * group + hl) * part_stride;
      const float w = std::exp(pc[0] - M);
      L += w * pc[1];
      for (int d = 0; d < hdv; ++d) o[d] += w * pc[2 + d];
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    for (int d = 0; d < hdv; ++d) o[d] *= inv;
  }
}

// Every token of every sequence: one pass converting the queries, one parallel loop (two when few
// tokens leave threads idle) over all of them.
void typed_attention(const AttentionShape& s, int64_t q_stride, std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  const KernelTable& kt = kernels();
  const int hd = s.head_dim_k, hdv = s.head_dim_v, group = s.n_head / s.n_head_kv;
  const Type qt = act_type(seqs[0].k.type);
  const size_t q_row_bytes = row_bytes(qt, hd);
  const QuantizeFn to_q = kt.quantize[static_cast<uint32_t>(qt)];
  struct Tok {
    const AttentionSeq* seq;
    int i;  // within the sequence
  };
  thread_local std::vector<Tok> toks;
  toks.clear();
  int max_pieces = 1;
  for (const AttentionSeq& sq : seqs) {
    for (int i = 0; i < sq.n; ++i) toks.push_back({&sq, i});
    max_pieces = std::max(max_pieces, (sq.pos0 + sq.n - 1) / kAttnChunk + 1);
  }
  const int n = static_cast<int>(toks.size());
  thread_local std::vector<uint8_t> qa;
  if (qa.size() < static_cast<size_t>(n) * s.n_head * q_row_bytes) qa.resize(static_cast<size_t>(n) * s.n_head * q_row_bytes);
  for (int t = 0; t < n; ++t) {
    const float* qt_row = toks[static_cast<size_t>(t)].seq->q + static_cast<size_t>(toks[static_cast<size_t>(t)].i) * static_cast<size_t>(q_stride);
    for (int h = 0; h < s.n_head; ++h) {
      to_q(qt_row + static_cast<size_t>(h) * hd, qa.data() + (static_cast<size_t>(t) * s.n_head + h) * q_row_bytes, hd);
    }
  }
  // (the workers reach the buffers through pointers: a thread_local named in the lambda would be theirs)
  const uint8_t* qa_data = qa.data();
  const Tok* tok = toks.data();
  auto token_group = [&](int t, int g) {
    const Tok& tk = tok[t];
    const int pos = tk.seq->pos0 + tk.i;
    TokenGroup tg;
    tg.qa = qa_data + (static_cast<size_t>(t) * s.n_head + static_cast<size_t>(g) * group) * q_row_bytes;
    tg.first = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
    tg.last = pos;
    return tg;
  };
  auto out_of = [&](int t) { return tok[t].seq->out + static_cast<size_t>(tok[t].i) * s.n_head * hdv; };
  const size_t piece_floats = static_cast<size_t>(group) * (2 + static_cast<size_t>(hdv));
  const int64_t pairs = static_cast<int64_t>(n) * s.n_head_kv;
  if (pairs >= 2 * pool.size() || max_pieces == 1) {
    // One task per token and KV head, its pieces in turn.
    pool.parallel_for(pairs, 1, [&](int, int64_t b, int64_t e) {
      thread_local std::vector<float> parts;
      for (int64_t p = b; p < e; ++p) {
        const int t = static_cast<int>(p / s.n_head_kv), g = static_cast<int>(p % s.n_head_kv);
        const TokenGroup tg = token_group(t, g);
        const int c0 = tg.first / kAttnChunk, c1 = tg.last / kAttnChunk;
        if (parts.size() < static_cast<size_t>(c1 - c0 + 1) * piece_floats) parts.resize(static_cast<size_t>(c1 - c0 + 1) * piece_floats);
        for (int c = c0; c <= c1; ++c) {
          attention_piece(s, tok[t].seq->k, tok[t].seq->v, tg, g, c, q_row_bytes, parts.data() + static_cast<size_t>(c - c0) * piece_floats);
        }
        attention_combine(s, g, c1 - c0 + 1, parts.data(), out_of(t));
      }
    });
    return;
  }
  // Few tokens (decoding): the pieces of every token and KV head are the tasks, then each pair's
  // pieces combine (the same pieces and the same combination as above).
  struct Task { int t, g, c, slot; };
  std::vector<Task> tasks;
  std::vector<int> first_slot(static_cast<size_t>(pairs) + 1, 0);
  int slots = 0;
  for (int t = 0; t < n; ++t) {
    for (int g = 0; g < s.n_head_kv; ++g) {
      const TokenGroup tg = token_group(t, g);
      first_slot[static_cast<size_t>(t) * s.n_head_kv + g] = slots;
      for (int c = tg.first / kAttnChunk; c <= tg.last / kAttnChunk; ++c) tasks.push_back({t, g, c, slots++});
    }
  }
  first_slot[static_cast<size_t>(pairs)] = slots;
  thread_local std::vector<float> parts;
  if (parts.size() < static_cast<size_t>(slots) * piece_floats) parts.resize(static_cast<size_t>(slots) * piece_floats);
  float* parts_data = parts.data();
  pool.parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int, int64_t b, int64_t e) {
    for (int64_t x = b; x < e; ++x) {
      const Task& tk = tasks[static_cast<size_t>(x)];
      attention_piece(s, tok[tk.t].seq->k, tok[tk.t].seq->v, token_group(tk.t, tk.g), tk.g, tk.c, q_row_bytes,
                      parts_data + static_cast<size_t>(tk.slot) * piece_floats);
    }
  });
  pool.parallel_for(pairs, 1, [&](int, int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int t = static_cast<int>(p / s.n_head_kv), g = static_cast<int>(p % s.n_head_kv);
      const int s0 = first_slot[static_cast<size_t>(p)], s1 = first_slot[static_cast<size_t>(p) + 1];
      attention_combine(s, g, s1 - s0, parts_data + static_cast<size_t>(s0) * piece_floats, out_of(t));
    }
  });
}

}  // namespace attention_core_detail

void causal_attention(const AttentionShape& s, const float* q, int64_t q_stride, const KvView& k, const KvView& v,
                      int n, int pos0, float* out, ThreadPool& pool) {
  if (k.type == Type::F32 && v.type == Type::F32) {
    causal_attention(s, q, q_stride, reinterpret_cast<const float*>(k.data), reinterpret_cast<const float*>(v.data), n,
                     pos0, out, pool);
  } else {
    const AttentionSeq one{q, k, v, n, pos0, out};
    attention_core_detail::typed_attention(s, q_stride, std::span<const AttentionSeq>(&one, 1), pool);
  }
}

void causal_attention(const AttentionShape& s, int64_t q_stride, std::span<const AttentionSeq> seqs, ThreadPool& pool) {
  if (seqs.empty()) return;
  if (seqs[0].k.type == Type::F32 && seqs[0].v.type == Type::F32) {
    for (const AttentionSeq& sq : seqs) causal_attention(s, sq.q, q_stride, sq.k, sq.v, sq.n, sq.pos0, sq.out, pool);
  } else {
    attention_core_detail::typed_attention(s, q_stride, seqs, pool);
  }
}

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
