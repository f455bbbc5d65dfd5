#include "les/model/ops.h"

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

void rope_cache(const RopeParams& p, int64_t pos, float* cache) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float theta = static_cast<float>(pos);
  for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
    const float ff = p.freq_factors ? p.freq_factors[i0 / 2] : 1.0f;
    const float t = p.freq_scale * (theta / ff);
    cache[i0] = std::cos(t);
    cache[i0 + 1] = std::sin(t);
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
