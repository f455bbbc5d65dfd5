#include "les/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "les/util/error.h"

namespace les {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

float clean(float x) { return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x; }

}  // namespace

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

void Sampler::accept(int32_t token) {
  if (p_.repeat_last_n == 0) return;
  window_.push_back(token);
  if (p_.repeat_last_n > 0) {
    while (window_.size() > static_cast<size_t>(p_.repeat_last_n)) window_.pop_front();
  }
}

void Sampler::reset() {
  window_.clear();
  rng_.reseed(p_.seed);
}

// llama.cpp's penalties sampler (repeat part): every token present in the window, however often,
// has its logit divided by the penalty if positive, multiplied if not.
void Sampler::apply_penalty(std::vector<Cand>& c) const {
  if (p_.repeat_penalty == 1.0f || window_.empty()) return;
  const int n = static_cast<int>(c.size());
  std::vector<int32_t> seen;
  seen.reserve(window_.size());
  for (int32_t t : window_) {
    if (t >= 0 && t < n) seen.push_back(t);
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (int32_t t : seen) {  // candidates are still in id order here
    float& l = c[t].logit;
    l = l <= 0.0f ? l * p_.repeat_penalty : l / p_.repeat_penalty;
  }
}

int32_t Sampler::sample(const float* logits, int n_vocab) {
  distribution(logits, n_vocab, dist_);
  return draw(dist_);
}

int32_t Sampler::draw(const std::vector<TokenProb>& dist) {
  if (dist.empty()) throw Error("sampler: empty distribution");
  if (dist.size() == 1) return dist[0].id;
  const double r = rng_.uniform();
  double cum = 0;
  for (const TokenProb& t : dist) {
    cum += t.p;
    if (r < cum) return t.id;
  }
  return dist.back().id;
}

void Sampler::distribution(const float* logits, int n_vocab, std::vector<TokenProb>& out) {
  if (n_vocab <= 0) throw Error(strfmt("sampler: n_vocab = %d", n_vocab));
  out.clear();
  cand_.resize(n_vocab);
  for (int i = 0; i < n_vocab; ++i) cand_[i] = {clean(logits[i]), i};
  apply_penalty(cand_);

  if (p_.temp <= 0.0f) {
    int32_t best = 0;
    for (int i = 1; i < n_vocab; ++i) {
      if (cand_[i].logit > cand_[best].logit) best = i;
    }
    out.push_back({best, 1.0});
    return;
  }

  auto before = [](const Cand& a, const Cand& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t n = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    n = static_cast<size_t>(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + n, cand_.end(), before);
    cand_.resize(n);
  } else {
    std::sort(cand_.begin(), cand_.end(), before);
  }

  // probabilities of the remaining candidates (before temperature, as llama.cpp's chain)
  std::vector<double> prob(n);
  auto softmax = [&](size_t m, double scale) {
    const double mx = cand_[0].logit;
    double sum = 0;
    for (size_t i = 0; i < m; ++i) {
      prob[i] = std::exp((static_cast<double>(cand_[i].logit) - mx) * scale);
      sum += prob[i];
    }
    for (size_t i = 0; i < m; ++i) prob[i] /= sum;
  };

  if (p_.top_p < 1.0f) {
    softmax(n, 1.0);
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i];
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }

  if (p_.min_p > 0.0f && n > 1) {
    // keep p_i >= min_p * p_max, i.e. logit_i >= logit_max + log(min_p)
    const double min_logit = static_cast<double>(cand_[0].logit) + std::log(static_cast<double>(p_.min_p));
    size_t keep = 1;
    while (keep < n && static_cast<double>(cand_[keep].logit) >= min_logit) ++keep;
    n = keep;
  }

  if (n == 1 || std::isinf(cand_[0].logit)) {
    out.push_back({cand_[0].id, 1.0});
    return;
  }
  softmax(n, 1.0 / static_cast<double>(p_.temp));
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back({cand_[i].id, prob[i]});
}

}  // namespace les
