#include "les/mixed/sensitivity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "les/quality/token_compare.h"
#include "les/model/context.h"
#include "les/quant/kernels.h"
#include "les/util/error.h"
#include "les/util/mapped_file.h"

namespace les::mixed {

double sampled_rel_error(const uint8_t* src, const GroupTensor& t, Type dst, int sample_rows,
                         const ImportanceFn& importance, ThreadPool& pool, QuantMethod method) {
  const int64_t row_len = t.ne[0];
  const int64_t n_rows = static_cast<int64_t>(t.n_elements / static_cast<uint64_t>(row_len));
  const int64_t rows_per_matrix = t.ne.size() > 1 ? t.ne[1] : 1;
  const int64_t n = std::min<int64_t>(n_rows, std::max(1, sample_rows));
  const size_t in_row = row_bytes(t.src_type, row_len);
  const size_t q_row = row_bytes(dst, row_len);
  std::vector<double> err(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
  pool.parallel_for(n, 4, [&](int, int64_t i0, int64_t i1) {
    std::vector<float> x(static_cast<size_t>(row_len)), y(static_cast<size_t>(row_len)), scratch;
    std::vector<uint8_t> q(q_row);
    for (int64_t i = i0; i < i1; ++i) {
      // Rows spread evenly over the tensor (and so over its experts).
      const int64_t r = n == n_rows ? i : (i * n_rows + n_rows / 2) / n;
      dequantize_row(t.src_type, src + static_cast<size_t>(r) * in_row, x.data(), row_len);
      const float* imp = importance ? importance(t.name, static_cast<int>(r / rows_per_matrix), scratch) : nullptr;
      quantize_weights(method, dst, x.data(), q.data(), row_len, imp);
      dequantize_row(dst, q.data(), y.data(), row_len);
      double e = 0, s = 0;
      for (int64_t j = 0; j < row_len; ++j) {
        const double w = imp ? imp[j] : 1.0;
        const double d = static_cast<double>(x[static_cast<size_t>(j)]) - y[static_cast<size_t>(j)];
        e += w * d * d;
        s += w * static_cast<double>(x[static_cast<size_t>(j)]) * x[static_cast<size_t>(j)];
      }
      err[static_cast<size_t>(i)] = e;
      ref[static_cast<size_t>(i)] = s;
    }
  });
  double e = 0, s = 0;
  for (int64_t i = 0; i < n; ++i) {
    e += err[static_cast<size_t>(i)];
    s += ref[static_cast<size_t>(i)];
  }
  return s > 0 ? e / s : 0.0;
}

namespace {

// Candidate types of a group: those les runs that fit its rows and have fewer bits per weight than
// its source, less those that need an importance matrix when there is none; then the source
// itself (keep).
std::vector<CandidateResult> candidates_of(const TensorGroup& g, const SensitivityOptions& opt, bool with_importance) {
  std::vector<CandidateResult> out;
  const double src_bpw = g.src_bpw();
  for (Type t : weight_types()) {
    if (!opt.candidates.empty() && std::find(opt.candidates.begin(), opt.candidates.end(), t) == opt.candidates.end()) {
      continue;
    }
    if (!g.fits(t) || type_bpw(t) >= src_bpw) continue;
    if (!with_importance && quantizer_needs_importance(t)) continue;
    CandidateResult c;
    c.type = t;
    c.bytes = g.bytes(t);
    out.push_back(c);
  }
  std::stable_sort(out.begin(), out.end(), [](const CandidateResult& a, const CandidateResult& b) { return a.bytes < b.bytes; });
  CandidateResult keep;
  keep.type = g.tensors.front().src_type;
  keep.keep = true;
  keep.bytes = g.src_bytes();
  keep.measured = true;
  out.push_back(keep);
  return out;
}

}  // namespace

namespace {

// The calibration windows with what the base model computed for them: the input of every layer
// (so a measurement can start at the first layer its group changes) and the logits of every
// position.
class CalibrationSet {
 public:
  CalibrationSet(const Model& model, std::span<const int32_t> tokens, const SensitivityOptions& opt)
      : model_(model), n_ctx_(opt.n_ctx) {
    const ModelConfig& c = model.config();
    const int64_t avail = static_cast<int64_t>(tokens.size()) / opt.n_ctx;
    if (avail < 1) {
      throw Error(strfmt("calibration text has %zu tokens, fewer than one window of %d", tokens.size(), opt.n_ctx));
    }
    n_windows_ = static_cast<int>(std::min<int64_t>(avail, std::max(1, opt.n_windows)));
    ContextParams cp;
    cp.n_ctx = opt.n_ctx;
    cp.n_batch = opt.n_ctx;
    cp.n_threads = opt.n_threads;
    ctx_ = std::make_unique<Context>(model, cp);
    const size_t E = static_cast<size_t>(c.n_embd), V = static_cast<size_t>(c.n_vocab), T = static_cast<size_t>(n_ctx_);
    for (int w = 0; w < n_windows_; ++w) {
      windows_.push_back(tokens.subspan(static_cast<size_t>(w) * T, T));
      // inputs_[w][l]: input of layer l (l = n_layer: of the output head).
      std::vector<std::vector<float>> in(static_cast<size_t>(c.n_layer) + 1);
      ctx_->set_observer([&](int layer, const char* name, const float* x, int64_t n_tok, int64_t width) {
        if (layer >= 0 && std::strcmp(name, "l_out") == 0) {
          in[static_cast<size_t>(layer) + 1].assign(x, x + n_tok * width);
        }
      });
      ctx_->set_matmul_observer([&](const std::string& tensor, int expert, const float*, int64_t rows, int64_t) {
        if (expert >= 0) used_[tensor][expert] += rows;
      });
      ctx_->rollback(0);
      ctx_->eval(windows_.back(), true);
      ctx_->set_observer({});
      ctx_->set_matmul_observer({});
      inputs_.push_back(std::move(in));
      for (size_t j = 0; j + 1 < T; ++j) {
        base_.insert(base_.end(), ctx_->logits(static_cast<int>(j)), ctx_->logits(static_cast<int>(j)) + V);
      }
      (void)E;
    }
  }

  int n_positions() const { return n_windows_ * (n_ctx_ - 1); }

  // Experts of a routed-expert tensor that the calibration windows use (with the base model; a
  // change to layer l leaves layer l's routing as it is, so its other experts are never read).
  // Experts used -> rows routed to them.
  const std::map<int, int64_t>* used_experts(const std::string& tensor) const {
    auto it = used_.find(tensor);
    return it == used_.end() ? nullptr : &it->second;
  }

  // Mean KL divergence (base || model as it is now) over every calibration position, evaluating
  // from first_layer on (0: from the embeddings).
  double mean_kld(int first_layer) {
    const int n_vocab = model_.config().n_vocab;
    double sum = 0;
    size_t i = 0;
    for (int w = 0; w < n_windows_; ++w) {
      ctx_->rollback(0);
      if (first_layer <= 0) {
        ctx_->eval(windows_[static_cast<size_t>(w)], true);
      } else {
        ctx_->eval_from_layer(windows_[static_cast<size_t>(w)], first_layer,
                              inputs_[static_cast<size_t>(w)][static_cast<size_t>(first_layer)].data());
      }
      const auto& win = windows_[static_cast<size_t>(w)];
      for (int j = 0; j + 1 < n_ctx_; ++j, ++i) {
        sum += quality::compare_logits(base_.data() + i * static_cast<size_t>(n_vocab), ctx_->logits(j), n_vocab,
                                       win[static_cast<size_t>(j) + 1])
                   .kld;
      }
    }
    ctx_->rollback(0);
    return i > 0 ? sum / static_cast<double>(i) : 0.0;
  }

 private:
  const Model& model_;
  int n_ctx_ = 0, n_windows_ = 0;
  std::unique_ptr<Context> ctx_;
  std::vector<std::span<const int32_t>> windows_;
  std::vector<std::vector<std::vector<float>>> inputs_;  // [window][layer][n_ctx][n_embd]
  std::vector<float> base_;                              // [position][n_vocab]
  std::map<std::string, std::map<int, int64_t>> used_;   // routed-expert tensor -> expert -> rows
};

}  // namespace

namespace {

// A routed-expert tensor held as `held` (F16 or F32) in which the `k` used experts with the most
// routed rows carry the error of type t (converted to t and back) and the other used experts their
// source values; unused experts are zero (never read). *scale: all used rows / converted rows.
std::vector<uint8_t> probe_subset(const uint8_t* src, const GroupTensor& t, Type cand, Type held,
                                  const std::map<int, int64_t>* used, int k, const ImportanceFn& importance,
                                  ThreadPool& pool, QuantMethod method, double* scale) {
  const int64_t row_len = t.ne[0], per = t.ne[1];
  const int64_t n_rows = static_cast<int64_t>(t.n_elements / static_cast<uint64_t>(row_len));
  const size_t rb_held = row_bytes(held, row_len), rb_src = row_bytes(t.src_type, row_len);
  const size_t rb_cand = row_bytes(cand, row_len);
  std::vector<uint8_t> out(rb_held * static_cast<size_t>(n_rows), 0);
  if (!used || used->empty()) return out;
  std::vector<std::pair<int64_t, int>> by_rows;
  int64_t all = 0;
  for (const auto& [e, rows] : *used) {
    by_rows.emplace_back(-rows, e);
    all += rows;
  }
  std::sort(by_rows.begin(), by_rows.end());
  int64_t converted = 0;
  for (size_t i = 0; i < by_rows.size(); ++i) {
    const int e = by_rows[i].second;
    const bool convert = static_cast<int>(i) < k;
    if (convert) converted -= by_rows[i].first;
    const int64_t r0 = static_cast<int64_t>(e) * per;
    std::vector<uint8_t> q(convert ? rb_cand * static_cast<size_t>(per) : 0);
    if (convert) {
      convert_rows(src + static_cast<size_t>(r0) * rb_src, t.src_type, cand, t.ne, r0, per, q.data(), t.name,
                   importance, pool, method);
    }
    pool.parallel_for(per, 16, [&](int, int64_t a, int64_t b) {
      std::vector<float> x(static_cast<size_t>(row_len));
      for (int64_t r = a; r < b; ++r) {
        if (convert) {
          dequantize_row(cand, q.data() + static_cast<size_t>(r) * rb_cand, x.data(), row_len);
        } else {
          dequantize_row(t.src_type, src + static_cast<size_t>(r0 + r) * rb_src, x.data(), row_len);
        }
        quantize_row_ref(held, x.data(), out.data() + static_cast<size_t>(r0 + r) * rb_held, row_len);
      }
    });
  }
  *scale = converted > 0 ? static_cast<double>(all) / static_cast<double>(converted) : 1.0;
  return out;
}

}  // namespace

SensitivityReport measure_sensitivity(Model& model, std::span<const int32_t> calib_tokens,
                                      const std::vector<TensorGroup>& groups, const ImportanceFn& importance,
                                      const SensitivityOptions& opt, const SensitivityProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const gguf::File& f = model.gguf();
  const MappedFile map = MappedFile::open(model.path());
  ThreadPool pool(std::max(1, opt.n_threads));
  if (opt.n_ctx < 2) throw Error("calibration windows need at least 2 tokens");
  CalibrationSet calib(model, calib_tokens, opt);
  SensitivityReport rep;
  rep.n_tokens = calib.n_positions();

  // Weighted errors and the candidates worth measuring.
  for (const TensorGroup& g : groups) {
    GroupSensitivity gs;
    gs.group = g;
    gs.candidates = candidates_of(g, opt, static_cast<bool>(importance));
    for (CandidateResult& c : gs.candidates) {
      if (c.keep) continue;
      double e = 0, w = 0;
      for (const GroupTensor& t : g.tensors) {
        const gguf::TensorInfo* ti = f.find_tensor(t.name);
        LES_ASSERT(ti != nullptr);
        const double share = static_cast<double>(t.n_elements);
        e += share * sampled_rel_error(map.data() + f.data_offset + ti->offset, t, c.type, opt.sample_rows, importance, pool,
                                       opt.method);
        w += share;
      }
      c.rel_error = w > 0 ? e / w : 0;
    }
    if (opt.prune_dominated) {
      double best = INFINITY;
      std::vector<CandidateResult> kept;
      for (const CandidateResult& c : gs.candidates) {
        if (c.keep || c.rel_error < best) {
          kept.push_back(c);
          best = std::min(best, c.rel_error);
        }
      }
      gs.candidates = std::move(kept);
    }
    rep.groups.push_back(std::move(gs));
  }

  int total = 0;
  for (const auto& gs : rep.groups) {
    int n = 0;
    for (const auto& c : gs.candidates) n += c.keep ? 0 : 1;
    total += opt.probe_only ? std::min(n, 1) : n;
  }
  const int n_layer = model.config().n_layer;
  int done = 0;
  for (GroupSensitivity& gs : rep.groups) {
    // The first layer whose computation the group changes: its own; the output head runs after
    // every layer; the embeddings (and anything unknown) need the whole pass.
    int first_layer = gs.group.layer >= 0 && gs.group.layer < n_layer ? gs.group.layer : 0;
    if (gs.group.layer < 0 && gs.group.kind == "output") first_layer = n_layer;
    const CandidateResult* probe = nullptr;
    for (CandidateResult& c : gs.candidates) {
      if (c.keep) continue;
      if (opt.probe_only && probe) {  // predicted from the probe
        c.dkld = probe->rel_error > 0 ? probe->dkld * c.rel_error / probe->rel_error : 0.0;
        c.measured = false;
        continue;
      }
      if (progress) progress(done, total, gs.group.id() + " as " + type_name(c.type));
      // Probe with a subset of a routed group's experts: the experts with the most routed rows get
      // the candidate's error (converted to it and back, in F16), the other used experts keep
      // their data (in F16), and the measured dKLD is scaled by all rows / converted rows.
      const bool subset = opt.probe_only && opt.probe_experts > 0 && gs.group.routed_experts;
      double scale = 1.0;
      for (const GroupTensor& t : gs.group.tensors) {
        const gguf::TensorInfo* ti = f.find_tensor(t.name);
        const uint8_t* src = map.data() + f.data_offset + ti->offset;
        const int64_t n_rows = static_cast<int64_t>(t.n_elements / static_cast<uint64_t>(t.ne[0]));
        const std::map<int, int64_t>* used = gs.group.routed_experts ? calib.used_experts(t.name) : nullptr;
        if (subset) {
          const Type held = t.src_type == Type::F32 ? Type::F32 : Type::F16;
          std::vector<uint8_t> q =
              probe_subset(src, t, c.type, held, used, opt.probe_experts, importance, pool, opt.method, &scale);
          model.replace_tensor(t.name, held, std::move(q));
          continue;
        }
        const size_t rb_out = row_bytes(c.type, t.ne[0]), rb_in = row_bytes(t.src_type, t.ne[0]);
        std::vector<uint8_t> q(rb_out * static_cast<size_t>(n_rows));
        if (gs.group.routed_experts) {
          // Only the experts the windows use; the others stay zero and are never read.
          const int64_t per = t.ne[1];
          if (used) {
            for (const auto& [e, rows] : *used) {
              const int64_t r0 = static_cast<int64_t>(e) * per;
              convert_rows(src + static_cast<size_t>(r0) * rb_in, t.src_type, c.type, t.ne, r0, per,
                           q.data() + static_cast<size_t>(r0) * rb_out, t.name, importance, pool, opt.method);
            }
          }
        } else {
          convert_rows(src, t.src_type, c.type, t.ne, 0, n_rows, q.data(), t.name, importance, pool, opt.method);
        }
        model.replace_tensor(t.name, c.type, std::move(q));
      }
      c.dkld = calib.mean_kld(first_layer) * scale;
      for (const GroupTensor& t : gs.group.tensors) model.restore_tensor(t.name);
      c.measured = true;
      probe = &c;
      ++done;
    }
  }
  if (progress) progress(done, total, "done");
  rep.n_measurements = done;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace les::mixed
