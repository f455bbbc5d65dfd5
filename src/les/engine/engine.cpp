#include "les/engine/engine.h"

#include <algorithm>
#include <cstdio>

#include <sys/stat.h>

#include "les/chat/chat_template.h"
#include "les/engine/text_stream.h"
#include "les/sched/io_probe.h"
#include "les/util/error.h"

namespace les {

namespace {

// What a file drafter keeps resident, before it is built: its file's size.
uint64_t drafter_file_bytes(const DrafterOptions& d) {
  if (d.kind != "draft" && d.kind != "dspark") return 0;
  struct stat st {};
  return !d.draft_path.empty() && ::stat(d.draft_path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

Engine::Engine(EngineOptions opts) : opts_(std::move(opts)) {
  ContextParams& cp = opts_.context;
  if (cp.n_threads < 1 || cp.n_threads > 256) throw Error("threads must be in [1, 256]");
  if (cp.n_ctx < 0) throw Error("the context size must be >= 0");
  if (cp.n_batch < 1) throw Error("the batch size must be >= 1");
  // Where memory goes (memory_choice.h), decided from the file's header before anything loads.
  {
    const ModelFootprint fp = footprint_of(gguf::read_file(opts_.model_path), opts_.model_path);
    MemoryRequest mr;
    mr.mem = opts_.mem;
    mr.mem_auto = opts_.mem_auto;
    mr.resident = opts_.resident;
    mr.n_ctx = cp.n_ctx;
    mr.n_batch = cp.n_batch;
    mr.drafter_bytes = opts_.drafter_factory ? 0 : drafter_file_bytes(opts_.drafter);
    choice_ = choose_memory(fp, mr, opts_.memory_facts ? *opts_.memory_facts : MemoryFacts::of_this_machine());
    cp.n_ctx = choice_.n_ctx;
    if (choice_.mode == MemoryMode::stream) {
      opts_.mem = choice_.budget;
    } else {
      opts_.mem = 0;
      opts_.resident = choice_.mode == MemoryMode::read ? ResidentMemory::read : ResidentMemory::map;
    }
  }
  const bool streaming = opts_.mem > 0;
  model_ = Model::load(opts_.model_path, LoadOptions{.map_experts = !streaming, .resident = opts_.resident});
  tok_ = std::make_unique<Tokenizer>(vocab_from_gguf(model_->gguf()));
  const auto text_of = [&](int32_t id) { return id >= 0 ? tok_->token_text(id) : std::string(); };
  try {
    chat_ = std::make_unique<ChatTemplate>(tok_->vocab().chat_template,
                                           ChatTemplateOptions{text_of(tok_->bos()), text_of(tok_->eos())});
  } catch (const Error& e) {
    chat_error_ = strfmt("the model's chat template (tokenizer.chat_template) cannot be used: %s", e.what());
  }


  if (opts_.drafter_factory) {
    drafter_ = opts_.drafter_factory(*model_);
  } else if (!opts_.drafter.kind.empty() && opts_.drafter.kind != "none") {
    DrafterOptions d = opts_.drafter;
    d.n_threads = cp.n_threads;
    d.n_ctx = cp.n_ctx;
    drafter_ = make_drafter(d, *model_);
  }
  if (drafter_) depth_ = std::make_unique<DepthController>(opts_.depth);

  if (streaming) {
    StreamingOptions so = opts_.streaming;
    const std::vector<uint64_t> slot = StreamingExperts::layer_slot_bytes_for(*model_, so.io_mode);
    const uint64_t drafter_bytes = drafter_ ? drafter_->resident_bytes() : 0;
    plan_ = plan_budget(*model_, opts_.mem, cp.n_ctx, cp.n_batch, slot, drafter_bytes);
    so.cache_bytes = plan_.cache;
    so.withheld_bytes = 0;
    if (drafter_ && drafter_bytes > 0 && opts_.depth.adaptive) {
      // The drafter's share of the cache is withheld (never touched) rather than missing: when the
      // depth controller gives speculation up, the drafter is freed and the slots go in use.
      so.cache_bytes = plan_budget(*model_, opts_.mem, cp.n_ctx, cp.n_batch, slot, 0).cache;
      so.withheld_bytes = so.cache_bytes - plan_.cache;
    }
    if (opts_.probe_io || so.read_chunk_auto) {
      IoProbeOptions po = io_probe_options_for(so);
      po.refresh = opts_.probe_refresh;
      po.quick = opts_.probe_quick;
      IoProbeResult pr = probe_model_io(*model_, po);
      probe_ = std::move(pr.probe);
      probe_cached_ = pr.cached;
    }
    if (so.read_chunk_auto) {
      const storage::ChunkChoice c = storage::choose_read_chunk(*probe_, experts_in_flight(so, *model_), so.queue_depth);
      so.read_chunk = c.chunk;
      std::fprintf(stderr, "les: read shaping: %s (device probe: whole experts %.0f MB/s%s)\n",
                   storage::read_shaping_name(c.chunk).c_str(), c.whole_mbs, c.chunk ? strfmt(", chunked %.0f MB/s", c.chosen_mbs).c_str() : "");
    }
    read_chunk_ = so.read_chunk;
    experts_ = std::make_unique<StreamingExperts>(*model_, so);
  }
  ctx_ = std::make_unique<Context>(*model_, cp, experts_.get());
}

Engine::~Engine() = default;

storage::DiskRates Engine::io_rates() const {
  return probe_ ? probe_->rates(opts_.streaming.queue_depth) : storage::DiskRates{};
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool parse_special) const {
  return tok_->encode(text, true, parse_special);
}

std::string Engine::render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const nlohmann::ordered_json& extra) const {
  if (!chat_) throw Error(chat_error_);
  return chat_->render(messages, add_generation_prompt, extra);
}

std::vector<int32_t> Engine::tokenize_chat(const std::string& rendered) const {
  // A template that writes the BOS token itself (Mixtral, OLMoE) must not get a second one.
  const int32_t bos = tok_->bos();
  const bool has_bos = bos >= 0 && !tok_->token_text(bos).empty() && rendered.starts_with(tok_->token_text(bos));
  return tok_->encode(rendered, !has_bos, true);
}

EngineResult Engine::generate(std::span<const int32_t> prompt, const EngineRequest& req, const TextCallback& on_text) {
  EngineResult r;
  r.n_prompt = static_cast<int>(prompt.size());
  if (prompt.empty()) throw Error("the prompt is empty (no tokens)");
  if (static_cast<int64_t>(prompt.size()) > ctx_->n_ctx()) {
    throw Error(strfmt("the prompt has %zu tokens but the context holds %d (raise -c / --ctx-size)", prompt.size(),
                       ctx_->n_ctx()));
  }
  // The longest prefix shared with what the context holds, less one token: the last prompt token
  // is always evaluated, for its logits.
  size_t keep = 0;
  if (opts_.reuse_prefix && !drafter_) {
    const std::span<const int32_t> held = ctx_->tokens();
    const size_t lim = std::min(held.size(), prompt.size() - 1);
    while (keep < lim && held[keep] == prompt[keep]) ++keep;
  }
  ctx_->rollback(static_cast<int>(keep));
  r.n_reused = static_cast<int>(keep);

  GenerateParams gp;
  gp.n_predict = req.n_predict;
  gp.sampling = req.sampling;
  gp.stop_at_eog = req.stop_at_eog;
  if (drafter_ && !drafter_->released()) {
    gp.drafter = drafter_.get();
    gp.depth = opts_.depth;
    gp.depth_state = depth_.get();
    gp.draft_p_min = opts_.draft_p_min;
    if (experts_ && experts_->withheld_bytes() > 0) {
      StreamingExperts* ex = experts_.get();
      gp.on_drafter_released = [ex](uint64_t) { ex->release_withheld(); };
      gp.drafter_cache_share = ex->withheld_share();
    }
  }

  TextStream stream(req.stop);
  bool cancelled = false;
  const auto emit = [&](const std::string& s) {
    if (s.empty()) return true;
    r.text += s;
    return on_text ? on_text(s) : true;
  };
  const std::vector<int32_t> suffix(prompt.begin() + static_cast<std::ptrdiff_t>(keep), prompt.end());
  r.stats = les::generate(*ctx_, *tok_, suffix, gp, [&](int32_t id, const std::string& piece) {
    // A cancel that came while this token was computed drops it: nothing after the request to stop
    // is shown (the token was computed, so it is counted).
    ++r.n_generated;
    if (req.cancel && req.cancel->load(std::memory_order_relaxed)) {
      cancelled = true;
      return false;
    }
    r.tokens.push_back(id);
    if (req.on_token) req.on_token(id);
    if (!emit(stream.push(piece))) {
      cancelled = true;
      return false;
    }
    return !stream.stopped();
  });
  if (!cancelled) emit(stream.finish());
  if (cancelled) r.finish_reason = "cancelled";
  else if (stream.stopped() || r.stats.stop_reason == "eog") r.finish_reason = "stop";
  else r.finish_reason = "length";
  return r;
}

}  // namespace les
