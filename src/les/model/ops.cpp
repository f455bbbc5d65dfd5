#include "les/model/ops.h"

#include <algorithm>
#include <cmath>

namespace les::ops {

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - mx);
    x[i] = e;
    sum += static_cast<double>(e);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void softmax_with_sink(float* x, int64_t n, float sink) {
  float mx = sink;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - mx);
    x[i] = e;
    sum += static_cast<double>(e);
  }
  sum += static_cast<double>(std::exp(sink - mx));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void set_yarn(RopeParams& p, const ModelConfig& c) {
  p.ext_factor = c.yarn_ext_factor;
  p.attn_factor = c.yarn_attn_factor;
  // ggml_rope_yarn_corr_dims: the dims whose wavelength spans beta_fast / beta_slow rotations
  // within the original context.
  const auto corr_dim = [&](float n_rot_turns) {
    return static_cast<float>(c.n_rot) *
           std::log(static_cast<float>(c.n_ctx_orig_yarn) / (n_rot_turns * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(p.freq_base));
  };
  const float start = std::floor(corr_dim(c.yarn_beta_fast));
  const float end = std::ceil(corr_dim(c.yarn_beta_slow));
  p.corr_dims[0] = std::max(0.0f, start);
  p.corr_dims[1] = std::min(static_cast<float>(c.n_rot - 1), end);
}

void rope_cache(const RopeParams& p, int64_t pos, float* cache) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float theta = static_cast<float>(pos);
  for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
    const float ff = p.freq_factors ? p.freq_factors[i0 / 2] : 1.0f;
    const float extrap = theta / ff;
    float t = p.freq_scale * extrap;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i0 / 2) - p.corr_dims[0]) / std::max(0.001f, p.corr_dims[1] - p.corr_dims[0]);
      const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      t = t * (1.0f - ramp) + extrap * ramp;
      mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    cache[i0] = std::cos(t) * mscale;
    cache[i0 + 1] = std::sin(t) * mscale;
    theta *= theta_scale;
  }
  if (p.type == RopeType::imrope) {
    // Interleaved M-RoPE with text positions (p, p, p, 0): pair i rotates by position p when its
    // sector falls in the t, h or w section, else by the e position 0 (no rotation).
    const int* s = p.sections;
    const int sect_dims = s[0] + s[1] + s[2] + s[3];
    for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
      const int sector = (i0 / 2) % sect_dims;
      const bool text = (sector % 3 == 1 && sector < 3 * s[1]) || (sector % 3 == 2 && sector < 3 * s[2]) ||
                        (sector % 3 == 0 && sector < 3 * s[0]);
      if (!text) {
        cache[i0] = 1.0f;
        cache[i0 + 1] = 0.0f;
      }
    }
  }
}

void hadamard_blocks(float* x, int64_t n, int block) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(block));
  for (int64_t b = 0; b < n; b += block) {
    float* v = x + b;
    for (int j = 0; j < block; ++j) v[j] = v[j] * scale;
    for (int len = 1; len < block; len <<= 1) {
      for (int i = 0; i < block; i += 2 * len) {
        for (int j = i; j < i + len; ++j) {
          const float a = v[j], c = v[j + len];
          v[j] = a + c;
          v[j + len] = a - c;
        }
      }
    }
  }
}

void rope_apply(const RopeParams& p, const float* cache, float* x) {
  if (p.type == RopeType::neox || p.type == RopeType::imrope) {
    const int half = p.n_rot / 2;
    for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
      const int ic = i0 / 2;
      const float c = cache[i0], s = cache[i0 + 1];
      const float x0 = x[ic], x1 = x[ic + half];
      x[ic] = x0 * c - x1 * s;
      x[ic + half] = x0 * s + x1 * c;
    }
  } else {
    for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
      const float c = cache[i0], s = cache[i0 + 1];
      const float x0 = x[i0], x1 = x[i0 + 1];
      x[i0] = x0 * c - x1 * s;
      x[i0 + 1] = x0 * s + x1 * c;
    }
  }
}

}  // namespace les::ops
