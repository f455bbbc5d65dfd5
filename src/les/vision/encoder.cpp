#include "les/vision/encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "les/quant/kernels.h"
#include "les/util/error.h"
#include "les/util/fp16.h"
#include "les/vision/flash_attention.h"

namespace les::vision {

namespace {

// llama.cpp's CPU GELU (tanh form) goes through a table of half-precision inputs and outputs:
// gelu(x) = half(gelu_tanh(half(x))) for |x| < 10, 0 below, x above.
float gelu_tanh_f32(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

struct GeluTable {
  std::vector<uint16_t> out;
  GeluTable() : out(1 << 16) {
    for (uint32_t i = 0; i < (1u << 16); ++i) out[i] = f32_to_fp16(gelu_tanh_f32(fp16_to_f32(static_cast<uint16_t>(i))));
  }
};

float gelu_tanh(float x) {
  static const GeluTable table;
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return fp16_to_f32(table.out[f32_to_fp16(x)]);
}

float gelu_erf(float x) {
  constexpr float kSqrt2Inv = 0.70710678118654752440084436210484f;
  return 0.5f * x * (1.0f + std::erf(x * kSqrt2Inv));
}

float gelu_quick(float x) { return x * (1.0f / (1.0f + std::exp(-1.702f * x))); }

// Rows of 64 queries per attention work item: a block's scores stay in cache.
constexpr int64_t kQueryBlock = 64;

}  // namespace

VisionEncoder::VisionEncoder(const Mmproj& mmproj, ThreadPool& pool) : mm_(mmproj), pool_(pool) {}

int VisionEncoder::n_tokens(int w, int h, int merge) const {
  const int p = mm_.config().patch_size;
  return (w / p / merge) * (h / p / merge);
}

void VisionEncoder::layer_norm(const float* x, int64_t n, int64_t width, const Vec& w, const Vec& b, float* y) {
  pool_.parallel_for(n, 16, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xr = x + t * width;
      float* yr = y + t * width;
      double sum = 0;
      for (int64_t i = 0; i < width; ++i) sum += xr[i];
      const float mean = static_cast<float>(sum / static_cast<double>(width));
      double var = 0;
      for (int64_t i = 0; i < width; ++i) {
        const float d = xr[i] - mean;
        yr[i] = d;
        var += static_cast<double>(d * d);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(var / static_cast<double>(width)) + mm_.config().eps);
      for (int64_t i = 0; i < width; ++i) {
        float v = yr[i] * scale;
        if (w.present()) v *= w.data[i];
        if (b.present()) v += b.data[i];
        yr[i] = v;
      }
    }
  });
}

void VisionEncoder::linear(const Matrix& W, const Vec& b, const float* x, int64_t n, float* y) {
  matmul(W, x, n, W.n_in, y, W.n_out, pool_, acts_);
  if (!b.present()) return;
  pool_.parallel_for(n, 64, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* yr = y + t * W.n_out;
      for (int64_t i = 0; i < W.n_out; ++i) yr[i] += b.data[i];
    }
  });
}

void VisionEncoder::attention(const Matrix& q, const Vec& qb, const Matrix& k, const Vec& kb, const Matrix& v,
                              const Vec& vb, const Matrix& o, const Vec& ob, const float* x, int64_t n, int window,
                              float* out) {
  const MmprojConfig& c = mm_.config();
  const int64_t E = c.n_embd, D = c.head_dim, H = c.n_head;
  q_.resize(static_cast<size_t>(n * E));
  k_.resize(static_cast<size_t>(n * E));
  v_.resize(static_cast<size_t>(n * E));
  att_.resize(static_cast<size_t>(n * E));
  quantize_acts(act_type(q.type), x, n, E, E, acts_, &pool_);
  std::vector<MatmulJob> jobs{{&q, q_.data(), E}, {&k, k_.data(), E}, {&v, v_.data(), E}};
  if (q.type == k.type && k.type == v.type) {
    matmul_many(jobs, acts_, pool_);
  } else {
    for (const MatmulJob& j : jobs) matmul(*j.W, x, n, E, j.y, E, pool_, acts_);
  }
  pool_.parallel_for(n, 64, [&](int, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < E; ++i) {
        if (qb.present()) q_[static_cast<size_t>(t * E + i)] += qb.data[i];
        if (kb.present()) k_[static_cast<size_t>(t * E + i)] += kb.data[i];
        if (vb.present()) v_[static_cast<size_t>(t * E + i)] += vb.data[i];
      }
    }
  });
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  // llama.cpp's flash attention: K and V in half precision; Q too, with a half-precision
  // accumulator, where its tiled kernel does not run (flash_attention.h).
  const bool f16acc = !exact_attention_ && !llamacpp_fa_tiled(D, n);
  if (!exact_attention_) {
    k16_.resize(static_cast<size_t>(n * E));
    v16_.resize(static_cast<size_t>(n * E));
    if (f16acc) q16_.resize(static_cast<size_t>(n * E));
    pool_.parallel_for(n, 64, [&](int, int64_t t0, int64_t t1) {
      for (size_t i = static_cast<size_t>(t0 * E); i < static_cast<size_t>(t1 * E); ++i) {
        k16_[i] = f32_to_fp16(k_[i]);
        v16_[i] = f32_to_fp16(v_[i]);
        k_[i] = fp16_to_f32(k16_[i]);
        v_[i] = fp16_to_f32(v16_[i]);
        if (f16acc) q16_[i] = f32_to_fp16(q_[i]);
      }
    });
  }

  if (f16acc) {
    const KernelTable& kt = kernels();
    if (window > 0) {
      pool_.parallel_for(n / window * H, 16, [&](int, int64_t i0, int64_t i1) {
        std::vector<float> dots(static_cast<size_t>(window));
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t g = i / H, h = i % H;
          for (int64_t a = 0; a < window; ++a) {
            const int64_t row = g * window + a;
            gemm_rows(kt, Type::F16, D, &k16_[static_cast<size_t>(g * window * E + h * D)], static_cast<size_t>(E) * 2,
                      window, &q16_[static_cast<size_t>(row * E + h * D)], static_cast<size_t>(E) * 2, 1, dots.data(),
                      window);
            fa_query_f16acc(dots.data(), window, &v16_[static_cast<size_t>(g * window * E + h * D)],
                            static_cast<size_t>(E), D, scale, &att_[static_cast<size_t>(row * E + h * D)]);
          }
        }
      });
    } else {
      const int64_t n_qb = (n + kQueryBlock - 1) / kQueryBlock;
      scores_.resize(static_cast<size_t>(pool_.size() * kQueryBlock * n));
      pool_.parallel_for(H * n_qb, 1, [&](int thread, int64_t i0, int64_t i1) {
        float* s = &scores_[static_cast<size_t>(thread * kQueryBlock * n)];
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t h = i / n_qb, qb0 = (i % n_qb) * kQueryBlock, nq = std::min(kQueryBlock, n - qb0);
          gemm_rows(kt, Type::F16, D, &k16_[static_cast<size_t>(h * D)], static_cast<size_t>(E) * 2, n,
                    &q16_[static_cast<size_t>(qb0 * E + h * D)], static_cast<size_t>(E) * 2, nq, s, n);
          for (int64_t a = 0; a < nq; ++a) {
            fa_query_f16acc(s + a * n, n, &v16_[static_cast<size_t>(h * D)], static_cast<size_t>(E), D, scale,
                            &att_[static_cast<size_t>((qb0 + a) * E + h * D)]);
          }
        }
      });
    }
  } else if (window > 0) {
    // Attention inside each group of `window` consecutive rows.
    pool_.parallel_for(n / window * H, 16, [&](int, int64_t i0, int64_t i1) {
      std::vector<float> s(static_cast<size_t>(window));
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t g = i / H, h = i % H;
        for (int64_t a = 0; a < window; ++a) {
          const float* qr = &q_[static_cast<size_t>((g * window + a) * E + h * D)];
          float mx = -INFINITY;
          for (int64_t bb = 0; bb < window; ++bb) {
            const float* kr = &k_[static_cast<size_t>((g * window + bb) * E + h * D)];
            float dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += qr[d] * kr[d];
            s[static_cast<size_t>(bb)] = dot * scale;
            mx = std::max(mx, s[static_cast<size_t>(bb)]);
          }
          float sum = 0;
          for (int64_t bb = 0; bb < window; ++bb) sum += (s[static_cast<size_t>(bb)] = std::exp(s[static_cast<size_t>(bb)] - mx));
          float* yr = &att_[static_cast<size_t>((g * window + a) * E + h * D)];
          for (int64_t d = 0; d < D; ++d) yr[d] = 0;
          for (int64_t bb = 0; bb < window; ++bb) {
            const float p = s[static_cast<size_t>(bb)] / sum;
            const float* vr = &v_[static_cast<size_t>((g * window + bb) * E + h * D)];
            for (int64_t d = 0; d < D; ++d) yr[d] += p * vr[d];
          }
        }
      }
    });
  } else {
    // Full attention: per head, V transposed once; then blocks of queries (scores, softmax, P V).
    vt_.resize(static_cast<size_t>(H * D * n));
    pool_.parallel_for(H * D, 8, [&](int, int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t h = r / D, d = r % D;
        float* dst = &vt_[static_cast<size_t>(r * n)];
        for (int64_t t = 0; t < n; ++t) dst[t] = v_[static_cast<size_t>(t * E + h * D + d)];
      }
    });
    const int64_t n_qb = (n + kQueryBlock - 1) / kQueryBlock;
    scores_.resize(static_cast<size_t>(pool_.size() * kQueryBlock * n));
    const KernelTable& kt = kernels();
    pool_.parallel_for(H * n_qb, 1, [&](int thread, int64_t i0, int64_t i1) {
      float* s = &scores_[static_cast<size_t>(thread * kQueryBlock * n)];
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t h = i / n_qb, qb0 = (i % n_qb) * kQueryBlock, nq = std::min(kQueryBlock, n - qb0);
        // s[a][t] = k_t . q_a over the head's D dims
        gemm_rows(kt, Type::F32, D, &k_[static_cast<size_t>(h * D)], static_cast<size_t>(E) * 4, n,
                  &q_[static_cast<size_t>(qb0 * E + h * D)], static_cast<size_t>(E) * 4, nq, s, n);
        for (int64_t a = 0; a < nq; ++a) {
          float* sr = s + a * n;
          float mx = -INFINITY;
          for (int64_t t = 0; t < n; ++t) mx = std::max(mx, sr[t] *= scale);
          float sum = 0;
          for (int64_t t = 0; t < n; ++t) sum += (sr[t] = std::exp(sr[t] - mx));
          const float inv = 1.0f / sum;
          for (int64_t t = 0; t < n; ++t) sr[t] *= inv;
        }
        // att[a][h D + d] = vt[h][d] . s[a]
        gemm_rows(kt, Type::F32, n, &vt_[static_cast<size_t>(h * D * n)], static_cast<size_t>(n) * 4, D, s,
                  static_cast<size_t>(n) * 4, nq, &att_[static_cast<size_t>(qb0 * E + h * D)], E);
      }
    });
  }
  linear(o, ob, att_.data(), n, out);
}

void VisionEncoder::vit_layer(const VitLayer& L, float* x, int64_t n) {
  const MmprojConfig& c = mm_.config();
  const int64_t E = c.n_embd, F = c.n_ff;
  xn_.resize(static_cast<size_t>(n * E));
  tmp_.resize(static_cast<size_t>(n * E));
  layer_norm(x, n, E, L.ln1_w, L.ln1_b, xn_.data());
  attention(L.q, L.q_b, L.k, L.k_b, L.v, L.v_b, L.o, L.o_b, xn_.data(), n, 0, tmp_.data());
  for (int64_t i = 0; i < n * E; ++i) x[i] += tmp_[static_cast<size_t>(i)];
  layer_norm(x, n, E, L.ln2_w, L.ln2_b, xn_.data());
  big_.resize(static_cast<size_t>(n * F));
  linear(L.ff_up, L.ff_up_b, xn_.data(), n, big_.data());
  const bool gelu = c.gelu;
  pool_.parallel_for(n, 16, [&](int, int64_t t0, int64_t t1) {
    for (int64_t i = t0 * F; i < t1 * F; ++i) big_[static_cast<size_t>(i)] = gelu ? gelu_tanh(big_[static_cast<size_t>(i)]) : gelu_quick(big_[static_cast<size_t>(i)]);
  });
  linear(L.ff_down, L.ff_down_b, big_.data(), n, tmp_.data());
  for (int64_t i = 0; i < n * E; ++i) x[i] += tmp_[static_cast<size_t>(i)];
}

void VisionEncoder::gather_2x2(const float* x, int h, int w, float* cat) const {
  const int64_t E = mm_.config().n_embd;
  const int hh = h / 2, hw = w / 2;
  for (int i = 0; i < hh; ++i) {
    for (int j = 0; j < hw; ++j) {
      float* dst = cat + (static_cast<int64_t>(i) * hw + j) * 4 * E;
      int q = 0;
      for (int r = 0; r < 2; ++r) {
        for (int cc = 0; cc < 2; ++cc, ++q) {
          std::memcpy(dst + q * E, x + (static_cast<int64_t>(2 * i + r) * w + (2 * j + cc)) * E,
                      static_cast<size_t>(E) * 4);
        }
      }
    }
  }
}

std::vector<float> VisionEncoder::encode(const ImageF32& img, int merge) {
  const MmprojConfig& c = mm_.config();
  const MmprojWeights& W = mm_.weights();
  if (merge != 2 && merge != 4) throw Error(strfmt("image merge %d: must be 2 (4x compression) or 4 (16x)", merge));
  if (merge == 4 && !c.has_vit_merger()) {
    throw Error(mm_.path() + ": 16x compression needs the ViT merger, which this file does not hold (a 4x file)");
  }
  const int P = c.patch_size;
  if (img.width <= 0 || img.height <= 0 || img.width % (P * merge) != 0 || img.height % (P * merge) != 0 ||
      img.data.size() != static_cast<size_t>(3) * img.width * img.height) {
    throw Error(strfmt("vision encoder: a %dx%d image is not a multiple of %d pixels per side (patch %d x merge %d)",
                       img.width, img.height, P * merge, P, merge));
  }
  const int pw = img.width / P, ph = img.height / P;
  const int64_t n = static_cast<int64_t>(pw) * ph, E = c.n_embd, K = 3LL * P * P;

  // Patch embedding: each patch's pixels (channel, y, x) times the kernel.
  std::vector<float> col(static_cast<size_t>(n * K));
  pool_.parallel_for(n, 16, [&](int, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int py = static_cast<int>(p / pw), px = static_cast<int>(p % pw);
      float* dst = &col[static_cast<size_t>(p * K)];
      for (int ch = 0; ch < 3; ++ch) {
        for (int ky = 0; ky < P; ++ky) {
          const float* src = &img.data[(static_cast<size_t>(ch) * img.height + py * P + ky) * img.width + px * P];
          std::memcpy(dst + (ch * P + ky) * P, src, static_cast<size_t>(P) * 4);
        }
      }
    }
  });
  std::vector<float> x(static_cast<size_t>(n * E));
  linear(W.patch, W.patch_b, col.data(), n, x.data());
  col = {};
  // Learned position embedding of each patch's bucket in the table's side x side grid.
  const int side = c.n_pos_side;
  for (int py = 0; py < ph; ++py) {
    const int bh = static_cast<int>(std::floor(static_cast<double>(side) * py / ph));
    for (int px = 0; px < pw; ++px) {
      const int bw = static_cast<int>(std::floor(static_cast<double>(side) * px / pw));
      const float* pe = &W.pos[static_cast<size_t>(bh * side + bw) * E];
      float* xr = &x[static_cast<size_t>((static_cast<int64_t>(py) * pw + px) * E)];
      for (int64_t i = 0; i < E; ++i) xr[i] += pe[i];
    }
  }
  if (W.pre_ln_w.present()) layer_norm(x.data(), n, E, W.pre_ln_w, W.pre_ln_b, x.data());

  int gh = ph, gw = pw;  // the token grid
  if (merge == 4) {
    for (int il = 0; il <= c.insert_layer_id; ++il) vit_layer(W.layers[static_cast<size_t>(il)], x.data(), n);
    // ViT merger, window attention: rows reordered window-major (4 per 2x2 window).
    xn_.resize(static_cast<size_t>(n * E));
    layer_norm(x.data(), n, E, W.vm_ln1_w, W.vm_ln1_b, xn_.data());
    std::vector<float> win(static_cast<size_t>(n * E)), att(static_cast<size_t>(n * E));
    gather_2x2(xn_.data(), gh, gw, win.data());  // [n/4][4E] == [n][E] window-major
    attention(W.vm_q, W.vm_q_b, W.vm_k, W.vm_k_b, W.vm_v, W.vm_v_b, W.vm_o, W.vm_o_b, win.data(), n, 4, att.data());
    const int hw = gw / 2;
    for (int64_t wi = 0; wi < n / 4; ++wi) {
      const int64_t i = wi / hw, j = wi % hw;
      for (int q = 0; q < 4; ++q) {
        float* xr = &x[static_cast<size_t>(((2 * i + q / 2) * gw + (2 * j + q % 2)) * E)];
        const float* ar = &att[static_cast<size_t>((wi * 4 + q) * E)];
        for (int64_t e = 0; e < E; ++e) xr[e] = ar[e] + xr[e];
      }
    }
    // 2x2 downsample: MLP of the concatenated rows plus their mean.
    const int64_t nd = n / 4;
    std::vector<float> cat(static_cast<size_t>(nd * 4 * E)), catn(static_cast<size_t>(nd * 4 * E));
    gather_2x2(x.data(), gh, gw, cat.data());
    layer_norm(cat.data(), nd, 4 * E, W.vm_ds_ln_w, W.vm_ds_ln_b, catn.data());
    big_.resize(static_cast<size_t>(nd * c.n_ff_vit_merger));
    linear(W.vm_ds_up, W.vm_ds_up_b, catn.data(), nd, big_.data());
    for (float& v : big_) v = gelu_tanh(v);
    x.assign(static_cast<size_t>(nd * E), 0.0f);
    linear(W.vm_ds_down, W.vm_ds_down_b, big_.data(), nd, x.data());
    for (int64_t t = 0; t < nd; ++t) {
      const float* cr = &cat[static_cast<size_t>(t * 4 * E)];
      float* xr = &x[static_cast<size_t>(t * E)];
      for (int64_t e = 0; e < E; ++e) {
        const float mean = (((cr[e] + cr[E + e]) + cr[2 * E + e]) + cr[3 * E + e]) * 0.25f;
        xr[e] = xr[e] + mean;
      }
    }
    gh /= 2;
    gw /= 2;
    for (int il = c.insert_layer_id + 1; il < c.n_layer; ++il) vit_layer(W.layers[static_cast<size_t>(il)], x.data(), nd);
  } else {
    for (int il = 0; il < c.n_layer; ++il) vit_layer(W.layers[static_cast<size_t>(il)], x.data(), n);
  }
  const int64_t ng = static_cast<int64_t>(gh) * gw;
  if (W.post_ln_w.present()) layer_norm(x.data(), ng, E, W.post_ln_w, W.post_ln_b, x.data());

  // Final merger: 2x2 rows concatenated -> LayerNorm -> erf-GELU MLP.
  const int64_t no = ng / 4;
  std::vector<float> cat(static_cast<size_t>(no * 4 * E));
  gather_2x2(x.data(), gh, gw, cat.data());
  layer_norm(cat.data(), no, 4 * E, W.mm_norm_w, W.mm_norm_b, cat.data());
  big_.resize(static_cast<size_t>(no * c.n_ff_merger));
  linear(W.mm_up, W.mm_up_b, cat.data(), no, big_.data());
  for (float& v : big_) v = gelu_erf(v);
  std::vector<float> out(static_cast<size_t>(no * c.out_embd));
  linear(W.mm_down, W.mm_down_b, big_.data(), no, out.data());
  return out;
}

}  // namespace les::vision
