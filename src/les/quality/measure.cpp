#include "les/quality/measure.h"

#include <algorithm>

#include "les/quality/vocab_check.h"
#include "les/util/error.h"
#include "les/util/thread_pool.h"

namespace les::quality {

namespace {

constexpr int64_t kGrain = 8;  // positions per thread-pool chunk

// The scored positions j of a window (logits positions first-1 .. n_ctx-2).
int scored_per_window(const WindowOptions& o) { return o.n_ctx - o.first; }

// Accumulates per-token comparisons into KldResult.
class KldCollector {
 public:
  explicit KldCollector(KldResult& r) : r_(r) {}
  void add(const TokenCompare& t) {
    r_.per_token.push_back(t);
    test_.add(t.nll_test, false);
    base_.add(t.nll_base, false);
    ratio_.add(t.nll_test - t.nll_base);
    kld_.add(t.kld);
  }
  MeasureStatus status(int done, int total) const {
    return {done, total, test_.summary().ppl, kld_.mean()};
  }
  void finish(int n_top1_test, int n_top1_base) {
    r_.test = test_.summary();
    r_.base = base_.summary();
    const double n = static_cast<double>(r_.test.count);
    if (n > 0) {
      r_.test.top1 = n_top1_test / n;
      r_.base.top1 = n_top1_base / n;
    }
    r_.ln_ppl_ratio = ratio_.mean();
    r_.ln_ppl_ratio_se = ratio_.se();
    r_.kld = summarize_kld(r_.per_token);
  }

 private:
  KldResult& r_;
  PerplexityAccumulator test_, base_;
  MeanAccumulator ratio_, kld_;
};

}  // namespace

PerplexityResult measure_perplexity(const Model& model, std::span<const int32_t> tokens, const WindowOptions& opt,
                                    LogprobFileWriter* save, const MeasureProgressFn& progress) {
  WindowEvaluator ev(model, tokens, opt);
  const int nv = ev.n_vocab();
  const int n_pos = scored_per_window(opt);
  std::vector<uint16_t> records;
  if (save) {
    if (opt.first != logprob_first(opt.n_ctx)) {
      throw Error(strfmt("a log-probability file scores tokens %d..%d of each window (first = %d), not from token %d",
                         logprob_first(opt.n_ctx), opt.n_ctx - 1, logprob_first(opt.n_ctx), opt.first));
    }
    if (save->n_ctx() != opt.n_ctx || save->n_vocab() != nv || save->n_chunk() != ev.n_windows()) {
      throw Error(strfmt("log-probability file announced n_ctx=%d, n_vocab=%d, %d windows; the run has %d, %d, %d",
                         save->n_ctx(), save->n_vocab(), save->n_chunk(), opt.n_ctx, nv, ev.n_windows()));
    }
    records.resize(static_cast<size_t>(n_pos) * static_cast<size_t>(logprob_record_u16(nv)));
  }
  PerplexityResult r;
  r.windows = opt;
  r.n_windows = ev.n_windows();
  PerplexityAccumulator acc;
  std::vector<double> nll(static_cast<size_t>(n_pos));
  std::vector<uint8_t> hit(static_cast<size_t>(n_pos));
  const size_t rec_u16 = static_cast<size_t>(logprob_record_u16(nv));
  for (int w = 0; w < ev.n_windows(); ++w) {
    ev.eval(w);
    ev.pool().parallel_for(n_pos, kGrain, [&](int, int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int j = opt.first - 1 + static_cast<int>(k);
        const float* lg = ev.logits(j);
        const int32_t next = ev.token(w, j + 1);
        nll[static_cast<size_t>(k)] = token_nll(lg, nv, next);
        hit[static_cast<size_t>(k)] = argmax(lg, nv) == next;
        if (save) pack_log_probs(lg, nv, records.data() + static_cast<size_t>(k) * rec_u16);
      }
    });
    for (int k = 0; k < n_pos; ++k) acc.add(nll[static_cast<size_t>(k)], hit[static_cast<size_t>(k)] != 0);
    if (save) save->add_window(records);
    if (progress) progress({w + 1, ev.n_windows(), acc.summary().ppl, -1});
  }
  r.ppl = acc.summary();
  return r;
}

KldResult measure_kld(const Model& base, const Model& test, std::span<const int32_t> tokens, const WindowOptions& opt,
                      const MeasureProgressFn& progress) {
  check_same_vocabulary(base, test);
  WindowEvaluator ev_base(base, tokens, opt);
  WindowEvaluator ev_test(test, tokens, opt);
  const int nv = ev_test.n_vocab();
  const int n_pos = scored_per_window(opt);
  KldResult r;
  r.windows = opt;
  r.n_windows = ev_test.n_windows();
  r.per_token.reserve(static_cast<size_t>(r.n_windows) * static_cast<size_t>(n_pos));
  KldCollector col(r);
  std::vector<TokenCompare> win(static_cast<size_t>(n_pos));
  std::vector<uint8_t> hit_t(static_cast<size_t>(n_pos)), hit_b(static_cast<size_t>(n_pos));
  int n_top1_t = 0, n_top1_b = 0;
  for (int w = 0; w < r.n_windows; ++w) {
    ev_base.eval(w);
    ev_test.eval(w);
    ev_test.pool().parallel_for(n_pos, kGrain, [&](int, int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int j = opt.first - 1 + static_cast<int>(k);
        const int32_t next = ev_test.token(w, j + 1);
        win[static_cast<size_t>(k)] = compare_logits(ev_base.logits(j), ev_test.logits(j), nv, next);
        hit_t[static_cast<size_t>(k)] = argmax(ev_test.logits(j), nv) == next;
        hit_b[static_cast<size_t>(k)] = argmax(ev_base.logits(j), nv) == next;
      }
    });
    for (int k = 0; k < n_pos; ++k) {
      col.add(win[static_cast<size_t>(k)]);
      n_top1_t += hit_t[static_cast<size_t>(k)];
      n_top1_b += hit_b[static_cast<size_t>(k)];
    }
    if (progress) progress(col.status(w + 1, r.n_windows));
  }
  col.finish(n_top1_t, n_top1_b);
  return r;
}

KldResult measure_kld(const LogprobFile& base, const Model& test, const WindowOptions& opt,
                      const MeasureProgressFn& progress) {
  if (base.n_vocab() != test.config().n_vocab) {
    throw Error(strfmt("%s was made with a vocabulary of %d tokens, the model %s has %d", base.path().c_str(),
                       base.n_vocab(), test.path().c_str(), test.config().n_vocab));
  }
  if (opt.n_ctx != base.n_ctx() || opt.first != base.first()) {
    throw Error(strfmt("%s holds windows of %d tokens scored from token %d; asked for windows of %d from token %d",
                       base.path().c_str(), base.n_ctx(), base.first(), opt.n_ctx, opt.first));
  }
  WindowOptions o = opt;
  o.max_windows = opt.max_windows > 0 ? std::min(opt.max_windows, base.n_chunk()) : base.n_chunk();
  WindowEvaluator ev(test, base.tokens(), o);
  const int nv = ev.n_vocab();
  const int n_pos = scored_per_window(o);
  KldResult r;
  r.windows = o;
  r.n_windows = ev.n_windows();
  r.per_token.reserve(static_cast<size_t>(r.n_windows) * static_cast<size_t>(n_pos));
  KldCollector col(r);
  std::vector<TokenCompare> win(static_cast<size_t>(n_pos));
  std::vector<const uint16_t*> recs(static_cast<size_t>(n_pos));
  std::vector<uint8_t> hit_t(static_cast<size_t>(n_pos)), hit_b(static_cast<size_t>(n_pos));
  int n_top1_t = 0, n_top1_b = 0;
  for (int w = 0; w < r.n_windows; ++w) {
    for (int k = 0; k < n_pos; ++k) recs[static_cast<size_t>(k)] = base.record(w, k);  // checks each record
    ev.eval(w);
    ev.pool().parallel_for(n_pos, kGrain, [&](int, int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int j = o.first - 1 + static_cast<int>(k);
        const int32_t next = ev.token(w, j + 1);
        const uint16_t* rec = recs[static_cast<size_t>(k)];
        win[static_cast<size_t>(k)] = compare_packed(rec, ev.logits(j), nv, next);
        hit_t[static_cast<size_t>(k)] = argmax(ev.logits(j), nv) == next;
        hit_b[static_cast<size_t>(k)] = packed_argmax(rec, nv) == next;
      }
    });
    for (int k = 0; k < n_pos; ++k) {
      col.add(win[static_cast<size_t>(k)]);
      n_top1_t += hit_t[static_cast<size_t>(k)];
      n_top1_b += hit_b[static_cast<size_t>(k)];
    }
    if (progress) progress(col.status(w + 1, r.n_windows));
  }
  col.finish(n_top1_t, n_top1_b);
  return r;
}

}  // namespace les::quality
