#include "les/synth/design.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "les/model/router.h"
#include "les/synth/arch_synth.h"
#include "les/synth/random_fill.h"

namespace les::synth {

namespace {

constexpr double kLocalRangeNats = 12.0;  // score drop from distance 0 to far-away keys
constexpr float kLogitStd = 3.0f;         // std of the output logits
constexpr double kAttnToCtx = 0.9;        // share of an attention output in the context coordinates
constexpr double kMoeToCtx = 0.1;         // share of an MoE output in the context coordinates
constexpr float kOutputNormCtx = 0.5f;    // output_norm weight of the context coordinates
constexpr int kRefPosition = 64;          // fewest key positions the attention weights are computed over

bool has_router(const SynthSpec& s) { return s.arch != Arch::qwen3 && !(s.arch == Arch::llama && s.n_expert == 0); }
// gpt-oss's softmax over the k selected logits equals the renormalised top-k of the softmax.
bool norm_topk(Arch a) {
  return a == Arch::qwen3moe || a == Arch::llama || a == Arch::qwen35moe || a == Arch::qwen3next || a == Arch::glm4moe ||
         a == Arch::gpt_oss;
}
bool sigmoid_gating(Arch a) { return a == Arch::glm4moe; }
// Whether the shared expert's output is scaled by a sigmoid gate (qwen2moe, qwen35moe, qwen3next).
bool gated_shexp(Arch a) { return a == Arch::qwen2moe || a == Arch::qwen35moe || a == Arch::qwen3next; }
bool has_qk_norm(const SynthSpec& s) {
  const Arch a = s.arch;
  return a == Arch::qwen3moe || a == Arch::qwen3 || a == Arch::olmoe || a == Arch::qwen35moe || a == Arch::qwen3next ||
         s.qk_norm;
}
// Rotated dims of a head (the RoPE pairs the locality bias lives in).
int rope_dims(const SynthSpec& s) {
  const bool partial = s.arch == Arch::qwen35moe || s.arch == Arch::qwen3next || s.arch == Arch::glm4moe ||
                       s.arch == Arch::deepseek2;
  return partial && s.n_rot > 0 ? s.n_rot : s.head_dim;
}

// E[f(z)] for z ~ N(0, 1) by the trapezoid rule on [-12, 12].
template <class F>
double gauss_expect(F f) {
  const int n = 24000;
  const double a = -12.0, hstep = 24.0 / n;
  double s = 0;
  for (int i = 0; i <= n; ++i) {
    const double z = a + i * hstep;
    const double w = (i == 0 || i == n) ? 0.5 : 1.0;
    s += w * f(z) * std::exp(-0.5 * z * z);
  }
  return s * hstep / std::sqrt(2.0 * M_PI);
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// RoPE pair frequencies theta_i = base^(-2i / n_rot), as YaRN scales them (gpt-oss, deepseek2).
std::vector<double> rope_thetas(const SynthSpec& s) {
  if (s.arch == Arch::deepseek2) return deepseek2_rope_thetas(s);
  const int rot = rope_dims(s);
  std::vector<double> th(static_cast<size_t>(rot / 2));
  for (size_t i = 0; i < th.size(); ++i) {
    th[i] = std::pow(static_cast<double>(s.rope_freq_base), -2.0 * static_cast<double>(i) / rot) *
            yarn_theta_factor(s, static_cast<int>(i));
  }
  return th;
}

// The attention weights p truncated to the first `window` keys (a sliding window) and
// renormalised; window 0 or beyond p keeps p.
std::vector<double> truncate_weights(std::vector<double> p, int window) {
  if (window <= 0 || window >= static_cast<int>(p.size())) return p;
  double z = 0;
  for (int k = 0; k < window; ++k) z += p[static_cast<size_t>(k)];
  for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<int>(k) < window ? p[k] / z : 0.0;
  return p;
}

// pp[m] = sum_j p[j] p[j + m]: the attention output's autocovariance for white values.
std::vector<double> weight_autocov(const std::vector<double>& p) {
  const size_t n = p.size();
  std::vector<double> pp(n, 0.0);
  for (size_t m = 0; m < n; ++m) {
    for (size_t j = 0; j + m < n; ++j) pp[m] += p[j] * p[j + m];
  }
  return pp;
}

// Energy per RoPE pair of the locality bias: ~1/theta between theta = 1 and 1/(12 W), which makes
// sum_i c_i cos(d theta_i) fall roughly linearly with the distance d over a few W, then stay low.
std::vector<double> pair_energy(const SynthSpec& s) {
  const std::vector<double> th = rope_thetas(s);
  const double th_lo = 1.0 / (12.0 * s.attn_window);
  std::vector<double> c(th.size(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < th.size(); ++i) {
    if (i == 0 || th[i] >= th_lo) c[i] = 1.0 / th[i];
    sum += c[i];
  }
  // sum = head_dim: the bias vector has rms 1 (deepseek2: over the rope dims, where it lives)
  for (double& x : c) x *= (s.arch == Arch::deepseek2 ? rope_dims(s) : s.head_dim) / sum;
  return c;
}

double kernel(const std::vector<double>& c, const std::vector<double>& th, int dist) {
  double s = 0;
  for (size_t i = 0; i < c.size(); ++i) s += c[i] * std::cos(dist * th[i]);
  return s;
}

}  // namespace

double attention_bias_score(const SynthSpec& spec, const Design& d, int dist) {
  if (!d.local_attention) return 0.0;
  const std::vector<double> c = pair_energy(spec), th = rope_thetas(spec);
  // score = (s b) . R(dist) (s b) / sqrt(hd) with s^2 = bias_scale^2 (or qk norm) -> kappa * kernel
  const double kq = spec.arch == Arch::deepseek2 ? d.kq_scale : 1.0 / std::sqrt(static_cast<double>(spec.head_dim));
  const double kappa = static_cast<double>(d.score_scale) * d.score_scale * kq;
  return kappa * (kernel(c, th, dist) - kernel(c, th, 0));
}

Design make_design(const SynthSpec& s) {
  Design d;
  d.moe = has_router(s);
  d.local_attention = s.attn_window > 0.0f;
  const double E = s.n_embd;
  const double inv_sqrt_e = 1.0 / std::sqrt(E);
  d.sigma_embd = 1.0f;
  d.sigma_output = static_cast<float>(kLogitStd * inv_sqrt_e);
  d.output_norm_ctx = kOutputNormCtx;

  // --- attention locality -------------------------------------------------------------------
  // p[j]: the attention weight of the key j positions back (steady state, bias part only).
  const int hd = s.head_dim;
  // The attention's score scale (deepseek2: llama.cpp's, with YaRN's mscale and rope magnitude).
  d.kq_scale = s.arch == Arch::deepseek2 ? deepseek2_score_scale(s) : static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int n_p = std::max(1, std::min(s.n_ctx, std::clamp(static_cast<int>(8.0f * s.attn_window), kRefPosition, 1024)));
  std::vector<double> p(static_cast<size_t>(n_p), 1.0 / n_p);  // uniform without locality
  double scale2 = 1.0;            // s^2: product of the q and k deterministic scales
  // The log of a head's softmax denominator (sum_j exp(score_j)) over the full context and over a
  // sliding window: where the attention sinks of gpt-oss are placed.
  const int n_swa = s.arch == Arch::gpt_oss ? std::min(n_p, s.sliding_window) : n_p;
  double log_z_full = std::log(static_cast<double>(n_p)) + 0.5, log_z_swa = std::log(static_cast<double>(n_swa)) + 0.5;
  if (d.local_attention) {
    const std::vector<double> c = pair_energy(s), th = rope_thetas(s);
    const double d0 = kernel(c, th, 0);
    const int far0 = static_cast<int>(std::min(24.0 * s.attn_window, 1e6));
    double far = 0;
    for (int k = 0; k < 4096; ++k) far += kernel(c, th, far0 + k);
    far /= 4096.0;
    double range = d0 - far;
    if (!(range > 1e-3 * d0)) range = d0;
    const double kappa = kLocalRangeNats / range;  // nats per unit of kernel
    scale2 = s.arch == Arch::deepseek2 ? kappa / d.kq_scale : kappa * std::sqrt(static_cast<double>(hd));
    double z = 0, z_swa = 0;
    for (int k = 0; k < n_p; ++k) {
      z += p[static_cast<size_t>(k)] = std::exp(kappa * (kernel(c, th, k) - d0));
      if (k < n_swa) z_swa += p[static_cast<size_t>(k)];
    }
    for (double& x : p) x /= z;
    // Scores: kappa * kernel(dist) from the biases, plus the q/k content terms of variance
    // kappa^2 hd rho^2 (2 + rho^2), which add half of it to log sum exp.
    const double rho = d.content_ratio;
    const double noise = kappa * kappa * hd * rho * rho * (2.0 + rho * rho);
    log_z_full = kappa * d0 + std::log(z) + 0.5 * noise;
    log_z_swa = kappa * d0 + std::log(z_swa) + 0.5 * noise;
    // deepseek2: the bias of the rope part only (MLA's query / key rope dims).
    d.head_bias.assign(static_cast<size_t>(s.arch == Arch::deepseek2 ? rope_dims(s) : hd), 0.0f);
    const int half = rope_dims(s) / 2;
    for (int i = 0; i < half; ++i) {
      // NEOX rotates (i, i + n_rot/2), NORM (llama, deepseek2) rotates (2i, 2i + 1).
      const bool norm_rope = s.arch == Arch::llama || s.arch == Arch::deepseek2;
      const size_t at = norm_rope ? static_cast<size_t>(2 * i) : static_cast<size_t>(i);
      d.head_bias[at] = static_cast<float>(std::sqrt(c[static_cast<size_t>(i)]));
    }
  }
  double s2 = 0;
  for (double x : p) s2 += x * x;
  const std::vector<double> pp = weight_autocov(p);
  const std::vector<double> pp_swa = weight_autocov(truncate_weights(p, n_swa));
  d.attn_sum_p2 = s2;
  const double rho = d.local_attention ? d.content_ratio : 1.0;
  // YaRN multiplies the rotated q and k by `mag`: the deterministic scales make up for it.
  const double mag = yarn_magnitude(s);
  double qk_sigma;  // element std of Wq and Wk
  if (has_qk_norm(s)) {
    // q = rmsnorm(b + rho n) * w: rms(b + rho n) = sqrt(1 + rho^2), so w = s sqrt(1 + rho^2).
    d.bias_scale = 1.0f;
    d.qk_norm_weight = static_cast<float>((d.local_attention ? std::sqrt(scale2 * (1.0 + rho * rho)) : 1.0) / mag);
    qk_sigma = rho * inv_sqrt_e;
  } else {
    d.bias_scale = static_cast<float>(std::sqrt(scale2) / mag);
    qk_sigma = (d.local_attention ? rho * std::sqrt(scale2) * inv_sqrt_e : inv_sqrt_e) / mag;
  }
  d.score_scale = static_cast<float>(std::sqrt(scale2));

  // --- FFN expectations ------------------------------------------------------------------------
  d.silu_sq = gauss_expect([](double z) { const double v = z * sigmoid(z); return v * v; });
  // E[act^2] of the routed experts: silu(g) u, or gpt-oss's clamped min(g, 7) sigmoid(1.702 min(g, 7))
  // (clamp(u, -7, 7) + 1) with E[(u + 1)^2] = 2.
  const double act_sq = s.arch != Arch::gpt_oss ? d.silu_sq : 2.0 * gauss_expect([](double z) {
    const double g = std::min(z, 7.0), v = g * sigmoid(1.702 * g);
    return v * v;
  });
  const double sig_sq = gauss_expect([](double z) { const double v = sigmoid(z); return v * v; });
  const int n_exp = d.moe ? s.n_expert : 1;
  const int k = d.moe ? s.n_expert_used : 1;
  std::vector<double> gain_by_rank(static_cast<size_t>(n_exp), 1.0);
  if (d.moe) {
    double ms = 0;
    for (int r = 0; r < n_exp; ++r) {
      gain_by_rank[static_cast<size_t>(r)] = std::pow(r + 1.0, -static_cast<double>(s.skew));
      ms += gain_by_rank[static_cast<size_t>(r)] * gain_by_rank[static_cast<size_t>(r)];
    }
    ms = std::sqrt(ms / n_exp);
    for (double& g : gain_by_rank) g /= ms;
    // E[sum w^2] of the routing weights, by simulation of Gaussian logits with these gains.
    Rng rng(mix64(s.seed) ^ 0x726f757465ull);
    if (s.arch == Arch::deepseek2) d.route_w2 = deepseek2_route_w2(s, gain_by_rank, rng);
    else {
    const int n_sim = 2048;
    std::vector<double> z(static_cast<size_t>(n_exp));
    std::vector<int> idx(static_cast<size_t>(n_exp));
    double acc = 0;
    for (int t = 0; t < n_sim; ++t) {
      double mx = -1e300;
      for (int e = 0; e < n_exp; ++e) {
        z[static_cast<size_t>(e)] = s.router_scale * gain_by_rank[static_cast<size_t>(e)] * rng.normal();
        mx = std::max(mx, z[static_cast<size_t>(e)]);
      }
      if (sigmoid_gating(s.arch)) {
        for (double& v : z) v = sigmoid(v);
      } else {
        double sum = 0;
        for (double& v : z) sum += v = std::exp(v - mx);
        for (double& v : z) v /= sum;
      }
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                        [&](int a, int b) { return z[static_cast<size_t>(a)] > z[static_cast<size_t>(b)]; });
      double wsum = 0, w2 = 0;
      for (int j = 0; j < k; ++j) wsum += z[static_cast<size_t>(idx[static_cast<size_t>(j)])];
      const double norm = norm_topk(s.arch) ? wsum : 1.0;
      for (int j = 0; j < k; ++j) {
        const double w = z[static_cast<size_t>(idx[static_cast<size_t>(j)])] / norm;
        w2 += w * w;
      }
      acc += w2;
    }
    d.route_w2 = acc / n_sim * s.expert_weights_scale * s.expert_weights_scale;
    }
  }

  // --- per layer ----------------------------------------------------------------------------
  const double u2 = static_cast<double>(s.update) * s.update;
  const double a2 = s.attn_share * u2, m2 = (1.0 - s.attn_share) * u2;
  const double F = s.n_ff_exp, FS = s.n_ff_shexp;
  const double routed_frac = s.n_ff_shexp > 0 ? (k * F) / (k * F + FS) : 1.0;
  const int nc = s.n_embd / 2, nt = s.n_embd - nc;
  d.n_ctx_dims = nc;
  const double phi_r = s.context_focus;
  // The stream's autocovariance over token lags 0..n_p-1, summed over the context (SC) and the
  // token (ST) coordinates. Embedding and MoE outputs are white (uncorrelated between tokens); an
  // attention output averages the values V of recent tokens, which are correlated as the normed
  // stream is: its variance, and so the scale of attn_output, depends on that correlation, and it
  // adds a slowly varying part to the stream.
  std::vector<double> SC(static_cast<size_t>(n_p), 0.0), ST(static_cast<size_t>(n_p), 0.0);
  std::vector<double> acf_y(static_cast<size_t>(n_p), 0.0);
  SC[0] = nc * static_cast<double>(d.sigma_embd) * d.sigma_embd;
  ST[0] = nt * static_cast<double>(d.sigma_embd) * d.sigma_embd;
  d.layers.resize(static_cast<size_t>(s.n_layer));
  d.stream_rms.resize(static_cast<size_t>(s.n_layer));
  d.stream_lag1.resize(static_cast<size_t>(s.n_layer));
  d.route_lag1.resize(static_cast<size_t>(s.n_layer));
  d.ctx_frac.resize(static_cast<size_t>(s.n_layer));
  d.attn_var.resize(static_cast<size_t>(s.n_layer));
  auto split = [&](double total_var, double frac_ctx, double per_unit) {
    // Row std for output variance total_var spread frac_ctx / (1 - frac_ctx) over the context /
    // token coordinates, a row of std 1 giving output variance per_unit.
    SplitSigma r;
    r.ctx = static_cast<float>(std::sqrt(total_var * frac_ctx / (nc * per_unit)));
    r.tok = static_cast<float>(std::sqrt(total_var * (1.0 - frac_ctx) / (nt * per_unit)));
    return r;
  };
  for (int il = 0; il < s.n_layer; ++il) {
    LayerDesign& L = d.layers[static_cast<size_t>(il)];
    const double v = SC[0] + ST[0];
    const bool swa = synth_is_swa(s, il);
    const std::vector<double>& ppl = swa ? pp_swa : pp;
    // acf_y(k) = sum_{i,j} p_i p_j rho_V(k + i - j) = sum_m pp(|m|) rho_V(|k + m|).
    for (int kk = 0; kk < n_p; ++kk) {
      double acc = 0;
      for (int m = -(n_p - 1); m < n_p; ++m) {
        const int lag = std::abs(kk + m);
        if (lag < n_p) acc += ppl[static_cast<size_t>(std::abs(m))] * (SC[static_cast<size_t>(lag)] + ST[static_cast<size_t>(lag)]) / v;
      }
      acf_y[static_cast<size_t>(kk)] = acc;
    }
    const double var_y = acf_y[0];
    const double A = a2 * v;  // total over all coordinates
    for (int kk = 0; kk < n_p; ++kk) {
      SC[static_cast<size_t>(kk)] += kAttnToCtx * A * acf_y[static_cast<size_t>(kk)] / var_y;
      ST[static_cast<size_t>(kk)] += (1.0 - kAttnToCtx) * A * acf_y[static_cast<size_t>(kk)] / var_y;
    }
    // The router sees the stream here (after attention): its columns are scaled so that the
    // context coordinates give a share context_focus of the logit variance router_scale^2.
    {
      const double vv = SC[0] + ST[0];
      const double xc2 = SC[0] / nc * (s.n_embd / vv), xt2 = ST[0] / nt * (s.n_embd / vv);  // x element variances
      L.router.ctx = static_cast<float>(s.router_scale * std::sqrt(phi_r / (nc * xc2)));
      L.router.tok = static_cast<float>(s.router_scale * std::sqrt((1.0 - phi_r) / (nt * xt2)));
    }
    const double M = (il == 0 ? static_cast<double>(s.first_update) * s.first_update : m2) * (SC[0] + ST[0]);
    const double moe_ctx = kMoeToCtx;
    SC[0] += moe_ctx * M;
    ST[0] += (1.0 - moe_ctx) * M;
    const double vv = SC[0] + ST[0];
    d.stream_rms[static_cast<size_t>(il)] = std::sqrt(vv / s.n_embd);
    d.stream_lag1[static_cast<size_t>(il)] = n_p > 1 ? (SC[1] + ST[1]) / vv : 0.0;
    d.route_lag1[static_cast<size_t>(il)] = n_p > 1 ? phi_r * SC[1] / SC[0] + (1.0 - phi_r) * ST[1] / ST[0] : 0.0;
    d.ctx_frac[static_cast<size_t>(il)] = SC[0] / vv;
    d.attn_var[static_cast<size_t>(il)] = var_y;
    L.sigma_q = L.sigma_k = static_cast<float>(qk_sigma);
    L.sigma_v = static_cast<float>(inv_sqrt_e);
    double kept2 = 1.0;  // mean over heads of the squared share of attention the sinks leave
    if (s.arch == Arch::gpt_oss) {
      // Sink shares f_h in [0.1, 0.5], a function of (seed, layer): sink = log Z + logit(f).
      Rng rng(tensor_key(s.seed, "attn_sinks.blk." + std::to_string(il)));
      const double log_z = swa ? log_z_swa : log_z_full;
      L.sinks.resize(static_cast<size_t>(s.n_head));
      kept2 = 0;
      for (float& sink : L.sinks) {
        const double f = 0.1 + 0.4 * rng.uniform();
        sink = static_cast<float>(log_z + std::log(f / (1.0 - f)));
        kept2 += (1.0 - f) * (1.0 - f) / s.n_head;
      }
    }
    const int v_width = s.arch == Arch::deepseek2 ? s.v_head_dim : hd;
    L.sigma_o = split(A, kAttnToCtx, var_y * s.n_head * v_width * kept2);
    L.sigma_gate = L.sigma_up = static_cast<float>(inv_sqrt_e);
    L.sigma_down = split(M * routed_frac, moe_ctx, d.route_w2 * F * act_sq);
    if (s.n_ff_shexp > 0) {
      L.sigma_sh_gate = L.sigma_sh_up = L.sigma_sh_inp = static_cast<float>(inv_sqrt_e);
      L.sigma_sh_down = split(M * (1.0 - routed_frac), moe_ctx, (gated_shexp(s.arch) ? sig_sq : 1.0) * FS * d.silu_sq);
    }
    if (il < s.n_dense_lead) L.sigma_down = split(M, moe_ctx, s.n_ff_dense * d.silu_sq);  // dense lead FFN
    if (d.moe) {
      // Popularity ranks: a permutation of the experts per layer, a function of (seed, layer).
      std::vector<int> perm(static_cast<size_t>(n_exp));
      std::iota(perm.begin(), perm.end(), 0);
      Rng rng(tensor_key(s.seed, "router_rank.blk." + std::to_string(il)));
      for (int i = n_exp - 1; i > 0; --i) {
        const int j = static_cast<int>(rng.next() % static_cast<uint64_t>(i + 1));
        std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
      }
      L.router_gain.resize(static_cast<size_t>(n_exp));
      for (int r = 0; r < n_exp; ++r) {
        L.router_gain[static_cast<size_t>(perm[static_cast<size_t>(r)])] = static_cast<float>(gain_by_rank[static_cast<size_t>(r)]);
      }
    }
  }
  if (s.arch == Arch::deepseek2) design_mla(s, d, rho, scale2);
  return d;
}

}  // namespace les::synth
