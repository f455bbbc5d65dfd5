#include "les/engine/batch_generator.h"

#include <algorithm>
#include <optional>

#include "les/engine/result_stream.h"
#include "les/session/decode_loop.h"
#include "les/util/clock.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les {

// One request in its slot. Not movable: out refers to req and on_text.
struct BatchGenerator::Request {
  Request(uint64_t id_, uint64_t order_, Context& ctx_, std::vector<int32_t> prompt_, const EngineRequest& req_,
          TextCallback on_text_)
      : id(id_), order(order_), ctx(ctx_), prompt(std::move(prompt_)), req(req_), on_text(std::move(on_text_)),
        out(req, on_text) {}
  uint64_t id, order;
  Context& ctx;
  std::vector<int32_t> prompt;  // the whole prompt
  EngineRequest req;
  TextCallback on_text;
  ResultStream out;
  std::optional<DecodeLoop> loop;
  GenerateStats st;
  size_t n_reused = 0;
  size_t evaluated = 0;               // prompt tokens in the context (from n_reused on)
  std::optional<int32_t> next;        // the sampled token to evaluate in the next step
  bool logits_ready = false;          // the prompt is evaluated: ctx's last logits are this request's
  double t_start = 0, t_first = 0;
};

BatchGenerator::BatchGenerator(Engine& engine) : engine_(engine) {
  slots_.resize(static_cast<size_t>(engine.n_parallel()));
}

BatchGenerator::~BatchGenerator() = default;

int BatchGenerator::n_busy() const {
  return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const auto& r) { return r != nullptr; }));
}

uint64_t BatchGenerator::start(std::vector<int32_t> prompt, const EngineRequest& req, TextCallback on_text) {
  if (prompt.empty()) throw Error("the prompt is empty (no tokens)");
  const int n_ctx = engine_.n_ctx();
  if (static_cast<int64_t>(prompt.size()) > n_ctx) {
    throw Error(strfmt("the prompt has %zu tokens but the context holds %d (raise -c / --ctx-size)", prompt.size(), n_ctx));
  }
  // The free slot sharing the longest prefix, less one token: the last prompt token is always
  // evaluated, for its logits.
  int best = -1;
  size_t best_keep = 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s]) continue;
    size_t keep = 0;
    if (engine_.options().reuse_prefix) {
      const std::span<const int32_t> held = engine_.slot_context(static_cast<int>(s)).tokens();
      const size_t lim = std::min(held.size(), prompt.size() - 1);
      while (keep < lim && held[keep] == prompt[keep]) ++keep;
    }
    if (best < 0 || keep > best_keep) {
      best = static_cast<int>(s);
      best_keep = keep;
    }
  }
  if (best < 0) throw Error(strfmt("all %d slots are busy", n_slots()));
  Context& ctx = engine_.slot_context(best);
  ctx.rollback(static_cast<int>(best_keep));
  auto r = std::make_unique<Request>(next_id_++, next_order_++, ctx, std::move(prompt), req, std::move(on_text));
  r->n_reused = best_keep;
  r->evaluated = best_keep;
  GenerateParams gp;
  gp.n_predict = req.n_predict;
  gp.sampling = req.sampling;
  gp.stop_at_eog = req.stop_at_eog;
  const std::span<const int32_t> suffix(r->prompt.data() + best_keep, r->prompt.size() - best_keep);
  r->loop.emplace(engine_.tokenizer(), gp, ctx.tokens(), suffix);
  r->st.n_prompt = static_cast<int>(suffix.size());
  r->t_start = now_s();
  const uint64_t id = r->id;
  slots_[static_cast<size_t>(best)] = std::move(r);
  return id;
}

void BatchGenerator::end(Request& r, std::vector<Finished>& done, std::string error) {
  Finished f;
  f.id = r.id;
  if (r.logits_ready) {
    r.st.gen_seconds = now_s() - r.t_first;
    r.st.final_logits_hash = hash64(r.ctx.last_logits(), sizeof(float) * static_cast<size_t>(r.ctx.model().config().n_vocab));
  }
  f.result = r.out.finish(r.st);
  f.result.n_prompt = static_cast<int>(r.prompt.size());
  f.result.n_reused = static_cast<int>(r.n_reused);
  f.error = std::move(error);
  done.push_back(std::move(f));
  for (auto& s : slots_) {
    if (s.get() == &r) s.reset();
  }
}

void BatchGenerator::after_logits(Request& r, std::vector<Finished>& done) {
  try {
    r.next = r.loop->next(r.ctx, r.ctx.last_logits(), [&r](int32_t id, const std::string& piece) {
      return r.out.on_token(id, piece);
    }, r.st);
  } catch (const std::exception& e) {
    end(r, done, e.what());
    return;
  }
  if (!r.next) end(r, done);
}

std::vector<BatchGenerator::Finished> BatchGenerator::step() {
  std::vector<Finished> done;
  last_ = BatchStepStats{};
  // Requests whose client left end now, before anything more is computed for them.
  for (auto& s : slots_) {
    if (s && s->req.cancel && s->req.cancel->load(std::memory_order_relaxed)) {
      s->out.cancel();
      s->st.stop_reason = "callback";
      end(*s, done);
    }
  }
  std::vector<Request*> active;
  for (auto& s : slots_) {
    if (s) active.push_back(s.get());
  }
  if (active.empty()) return done;
  std::sort(active.begin(), active.end(), [](const Request* a, const Request* b) { return a->order < b->order; });

  // One token per decoding request, then prompt chunks first come first served.
  std::vector<Context::SeqTokens> batch;
  std::vector<Request*> decoding, prefilling;
  std::vector<size_t> chunk;
  for (Request* r : active) {
    if (!r->next) continue;
    batch.push_back({&r->ctx, std::span<const int32_t>(&*r->next, 1)});
    decoding.push_back(r);
  }
  const int n_batch = engine_.options().context.n_batch;
  size_t room = static_cast<size_t>(std::max(1, n_batch - static_cast<int>(decoding.size())));
  for (Request* r : active) {
    if (r->next || r->evaluated == r->prompt.size() || room == 0) continue;
    const size_t take = std::min(room, r->prompt.size() - r->evaluated);
    batch.push_back({&r->ctx, std::span<const int32_t>(r->prompt.data() + r->evaluated, take)});
    prefilling.push_back(r);
    chunk.push_back(take);
    room -= take;
  }
  last_.sequences = static_cast<int>(batch.size());
  last_.decode_tokens = static_cast<int>(decoding.size());
  for (size_t c : chunk) last_.prompt_tokens += static_cast<int>(c);

  try {
    // Always through slot 0: one context's work buffers and threads serve every step.
    engine_.slot_context(0).eval_together(batch);
  } catch (const std::exception& e) {
    // Nothing of this step can be trusted: every request in it fails, the others go on.
    const std::string why = strfmt("evaluation failed: %s", e.what());
    for (Request* r : decoding) end(*r, done, why);
    for (Request* r : prefilling) end(*r, done, why);
    return done;
  }
  for (Request* r : decoding) {
    ++r->st.n_decode_evals;
    after_logits(*r, done);
  }
  for (size_t i = 0; i < prefilling.size(); ++i) {
    Request& r = *prefilling[i];
    r.evaluated += chunk[i];
    if (r.evaluated < r.prompt.size()) continue;
    r.t_first = now_s();
    r.st.prompt_seconds = r.t_first - r.t_start;
    r.logits_ready = true;
    after_logits(r, done);
  }
  return done;
}

}  // namespace les
