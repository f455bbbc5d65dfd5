#include "les/engine/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <sys/stat.h>

#include "les/chat/chat_template.h"
#include "les/engine/result_stream.h"
#include "les/sched/io_probe.h"
#include "les/util/clock.h"
#include "les/util/error.h"
#include "les/util/hash.h"
#include "les/vision/encoder.h"
#include "les/vision/image_decode.h"
#include "les/vision/image_prompt.h"
#include "les/vision/mmproj.h"

namespace les {

namespace {

// What the vision encoder takes besides its mapped file: the activations of one slice (about 1000
// patches of the SigLIP-400M shape at 4x: 90 MiB) and an image's rows, which the prompt, the image
// cache and the context each hold (1344x1008 at 4x: 1782 rows, 14 MiB each).
constexpr uint64_t kVisionWorkBytes = 192ull << 20;
// The automatic context with a vision encoder: at least this (or the model's own, if smaller).
constexpr int kVisionMinCtx = 4096;

// A file's size; 0 when there is no such file (the loader then says what is wrong).
uint64_t file_bytes(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// What a file drafter keeps resident, before it is built: its file's size.
uint64_t drafter_file_bytes(const DrafterOptions& d) {
  return d.kind == "draft" || d.kind == "dspark" ? file_bytes(d.draft_path) : 0;
}

}  // namespace

Engine::Engine(EngineOptions opts) : opts_(std::move(opts)) {
  ContextParams& cp = opts_.context;
  if (cp.n_threads < 1 || cp.n_threads > 256) throw Error("threads must be in [1, 256]");
  if (cp.n_ctx < 0) throw Error("the context size must be >= 0");
  if (cp.n_batch < 1) throw Error("the batch size must be >= 1");
  if (opts_.n_parallel < 1 || opts_.n_parallel > 256) throw Error("--parallel must be in [1, 256]");
  const bool has_drafter = opts_.drafter_factory || (!opts_.drafter.kind.empty() && opts_.drafter.kind != "none");
  if (opts_.n_parallel > 1 && has_drafter) {
    throw Error("--parallel with speculative decoding (--spec) is not supported: batched serving decodes plainly");
  }
  // Where memory goes (memory_choice.h), decided from the file's header before anything loads.
  {
    const ModelFootprint fp = footprint_of(gguf::read_file(opts_.model_path), opts_.model_path);
    MemoryRequest mr;
    mr.mem = opts_.mem;
    mr.mem_auto = opts_.mem_auto;
    mr.resident = opts_.resident;
    mr.n_ctx = cp.n_ctx;
    mr.n_batch = cp.n_batch;
    mr.n_parallel = opts_.n_parallel;
    mr.type_k = cp.type_k;
    mr.type_v = cp.type_v;
    mr.drafter_bytes = opts_.drafter_factory ? 0 : drafter_file_bytes(opts_.drafter);
    // The vision encoder is resident beside the model, as a drafter is.
    if (!opts_.mmproj_path.empty()) {
      mr.drafter_label = mr.drafter_bytes > 0 ? "drafter and vision encoder" : "vision encoder";
      mr.drafter_bytes += file_bytes(opts_.mmproj_path) + kVisionWorkBytes;
      // One 4x image of 9 slices takes about 2600 positions.
      mr.min_ctx = kVisionMinCtx;
    }
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
                                           ChatTemplateOptions{text_of(tok_->bos()), text_of(tok_->eos()), std::nullopt});
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

  uint64_t vision_bytes = 0;
  if (!opts_.mmproj_path.empty()) {
    mmproj_ = vision::Mmproj::load(opts_.mmproj_path);
    if (mmproj_->config().out_embd != model_->config().n_embd) {
      throw Error(strfmt("%s: the vision encoder's output width is %d but the text model's n_embd is %lld: they are not "
                         "parts of one model",
                         opts_.mmproj_path.c_str(), mmproj_->config().out_embd,
                         static_cast<long long>(model_->config().n_embd)));
    }
    vision::image_merge(*mmproj_, opts_.image_compression);  // a compression the file can run
    markers_ = std::make_unique<vision::ImageMarkers>(vision::find_image_markers(*tok_));
    vision_bytes = mmproj_->bytes() + kVisionWorkBytes;
  }

  if (streaming) {
    StreamingOptions so = opts_.streaming;
    const std::vector<uint64_t> slot = StreamingExperts::layer_slot_bytes_for(*model_, so.io_mode);
    const uint64_t drafter_bytes = (drafter_ ? drafter_->resident_bytes() : 0) + vision_bytes;
    // The slot contexts beyond the first: their KV caches, recurrent state and work buffers are
    // planned as the drafter's bytes are, then counted where they belong.
    const StateBytes per_slot = state_bytes(model_->config(), model_->weights().mtp.runnable(), cp.n_ctx, cp.n_batch,
                                            cp.type_k, cp.type_v);
    const uint64_t more_slots = static_cast<uint64_t>(opts_.n_parallel - 1);
    plan_ = plan_budget(*model_, opts_.mem, cp.n_ctx, cp.n_batch, slot,
                        drafter_bytes + more_slots * (per_slot.kv + per_slot.recurrent + per_slot.work), cp.type_k,
                        cp.type_v);
    plan_.drafter = drafter_bytes;
    plan_.kv += more_slots * per_slot.kv;
    plan_.recurrent += more_slots * per_slot.recurrent;
    plan_.work += more_slots * per_slot.work;
    if (mmproj_) plan_.drafter_label = drafter_ ? "drafter and vision encoder" : "vision encoder";
    so.cache_bytes = plan_.cache;
    so.withheld_bytes = 0;
    if (drafter_ && drafter_bytes > vision_bytes && opts_.depth.adaptive) {
      // The drafter's share of the cache is withheld (never touched) rather than missing: when the
      // depth controller gives speculation up, the drafter is freed and the slots go in use.
      so.cache_bytes = plan_budget(*model_, opts_.mem, cp.n_ctx, cp.n_batch, slot, vision_bytes, cp.type_k, cp.type_v).cache;
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
  ExpertSource* source = experts_.get();
  if (!source && opts_.n_parallel > 1) {
    // Slot contexts evaluated together share one expert source (Context::eval_together).
    shared_resident_ = std::make_unique<ResidentExperts>(model_->weights());
    source = shared_resident_.get();
  }
  ctx_ = std::make_unique<Context>(*model_, cp, source);
  for (int i = 1; i < opts_.n_parallel; ++i) slot_ctx_.push_back(std::make_unique<Context>(*model_, cp, source));
  if (mmproj_) vision_ = std::make_unique<vision::VisionEncoder>(*mmproj_, ctx_->pool());
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
  const std::vector<int32_t> suffix(prompt.begin() + static_cast<std::ptrdiff_t>(keep), prompt.end());
  EngineResult r2 = run_generation(suffix, req, on_text);
  r2.n_prompt = r.n_prompt;
  r2.n_reused = static_cast<int>(keep);
  return r2;
}

EngineResult Engine::run_generation(const std::vector<int32_t>& suffix, const EngineRequest& req,
                                    const TextCallback& on_text) {
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

  ResultStream out(req, on_text);
  const GenerateStats st = les::generate(*ctx_, *tok_, suffix, gp, [&](int32_t id, const std::string& piece) {
    return out.on_token(id, piece);
  });
  return out.finish(st);
}

const vision::ImageChunk& Engine::encoded_image(const vision::ImageU8& img) {
  // The same image in a conversation's next turn (or another request) is not encoded again.
  uint64_t key = hash64(img.rgb.data(), img.rgb.size(), static_cast<uint64_t>(img.width) << 32 | static_cast<uint32_t>(img.height));
  key = hash64(&opts_.image_compression, sizeof(int), key);
  for (size_t i = 0; i < image_cache_.size(); ++i) {
    if (image_cache_[i].first == key) {
      std::rotate(image_cache_.begin(), image_cache_.begin() + static_cast<std::ptrdiff_t>(i),
                  image_cache_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return image_cache_.front().second;
    }
  }
  vision::ImageOptions io;
  io.compression = opts_.image_compression;
  image_cache_.insert(image_cache_.begin(), {key, vision::encode_image(*mmproj_, *vision_, img, *markers_, io)});
  constexpr size_t kCachedImages = 8;
  if (image_cache_.size() > kCachedImages) image_cache_.pop_back();
  return image_cache_.front().second;
}

MediaPrompt Engine::media_prompt(std::string_view text, std::span<const vision::ImageU8> images, bool chat) {
  if (!mmproj_) throw Error("this model takes no images: give the vision encoder with --mmproj");
  std::vector<std::string_view> segments;
  size_t start = 0;
  for (size_t pos; (pos = text.find(kImageMarker, start)) != std::string_view::npos; start = pos + kImageMarker.size()) {
    segments.push_back(text.substr(start, pos - start));
  }
  segments.push_back(text.substr(start));
  if (segments.size() - 1 != images.size()) {
    throw Error(strfmt("the prompt has %zu image markers but %zu images were given", segments.size() - 1, images.size()));
  }
  // Text first, once: the BOS rule applies to the prompt's start only (mtmd: add_special on the
  // first text part).
  std::vector<std::vector<int32_t>> text_ids(segments.size());
  int64_t positions = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i == 0) {
      text_ids[i] = chat ? tokenize_chat(std::string(segments[i])) : tok_->encode(segments[i], true, false);
    } else if (!segments[i].empty()) {
      text_ids[i] = tok_->encode(segments[i], false, chat);
    }
    positions += static_cast<int64_t>(text_ids[i].size());
  }
  // The prompt must fit the context: checked before any image is encoded (seconds each).
  for (const vision::ImageU8& img : images) {
    positions += vision::image_positions(*mmproj_, img.width, img.height, opts_.image_compression);
  }
  if (positions > ctx_->n_ctx()) {
    throw Error(strfmt("the prompt takes %lld positions (text and image tokens) but the context holds %d (raise -c / "
                       "--ctx-size, or use --image-compression 16)",
                       static_cast<long long>(positions), ctx_->n_ctx()));
  }
  MediaPrompt mp;
  const double t0 = now_s();
  for (size_t i = 0; i < segments.size(); ++i) {
    mp.tokens.insert(mp.tokens.end(), text_ids[i].begin(), text_ids[i].end());
    if (i < images.size()) {
      const vision::ImageChunk& c = encoded_image(images[i]);
      mp.tokens.insert(mp.tokens.end(), c.tokens.begin(), c.tokens.end());
      mp.rows.insert(mp.rows.end(), c.rows.begin(), c.rows.end());
      mp.n_rows += c.n_rows;
      ++mp.n_images;
    }
  }
  mp.encode_seconds = now_s() - t0;
  return mp;
}

EngineResult Engine::generate(const MediaPrompt& prompt, const EngineRequest& req, const TextCallback& on_text) {
  if (prompt.n_rows == 0) return generate(std::span<const int32_t>(prompt.tokens), req, on_text);
  if (drafter_) throw Error("images with speculative decoding are not supported: run without --spec");
  const int64_t E = model_->config().n_embd;
  if (static_cast<int64_t>(prompt.rows.size()) != prompt.n_rows * E) {
    throw Error(strfmt("media prompt: %lld rows of %lld floats expected, %zu floats given",
                       static_cast<long long>(prompt.n_rows), static_cast<long long>(E), prompt.rows.size()));
  }
  if (static_cast<int64_t>(prompt.tokens.size()) > ctx_->n_ctx()) {
    throw Error(strfmt("the prompt has %zu positions (text and image tokens) but the context holds %d (raise -c / --ctx-size)",
                       prompt.tokens.size(), ctx_->n_ctx()));
  }
  size_t last_row = 0;
  for (size_t i = 0; i < prompt.tokens.size(); ++i) {
    if (prompt.tokens[i] == Context::kEmbeddingRow) last_row = i;
  }
  if (last_row + 1 == prompt.tokens.size()) throw Error("media prompt: a prompt cannot end with a visual token");
  // Reuse of the cache: equal tokens, and visual tokens whose rows are equal (the same image again in
  // a conversation's next turn), up to the last visual token at most.
  size_t keep = 0;
  if (opts_.reuse_prefix) {
    const std::span<const int32_t> held = ctx_->tokens();
    const size_t lim = std::min(held.size(), last_row);
    int64_t row = 0;
    while (keep < lim && held[keep] == prompt.tokens[keep]) {
      if (prompt.tokens[keep] == Context::kEmbeddingRow) {
        const float* h = ctx_->embedding_row(static_cast<int>(keep));
        if (!h || std::memcmp(h, prompt.rows.data() + row * E, static_cast<size_t>(E) * sizeof(float)) != 0) break;
        ++row;
      }
      ++keep;
    }
  }
  int64_t rows_before = 0;
  for (size_t i = 0; i < keep; ++i) rows_before += prompt.tokens[i] == Context::kEmbeddingRow;
  ctx_->rollback(static_cast<int>(keep));
  const double t0 = now_s();
  const std::span<const int32_t> head(prompt.tokens.data() + keep, last_row + 1 - keep);
  ctx_->eval_mixed(head, prompt.rows.data() + rows_before * E, prompt.n_rows - rows_before, false);
  const double head_seconds = now_s() - t0;
  const std::vector<int32_t> tail(prompt.tokens.begin() + static_cast<std::ptrdiff_t>(last_row + 1), prompt.tokens.end());
  EngineResult r = run_generation(tail, req, on_text);
  r.n_prompt = static_cast<int>(prompt.tokens.size());
  r.n_reused = static_cast<int>(keep);
  r.stats.n_prompt += static_cast<int>(head.size());
  r.stats.prompt_seconds += head_seconds;
  return r;
}

}  // namespace les
