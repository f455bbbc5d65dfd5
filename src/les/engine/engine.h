// The library-level engine: one model with its tokenizer, context, expert streaming, drafter and
// chat template, configured once from EngineOptions, with one generate call that streams text to a
// callback and can be cancelled. `les run`, `les chat` and `les serve` use it; no front end wires
// these parts by hand.
//
// Not thread-safe: one generate at a time (the server queues requests in front of it).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "les/engine/memory_choice.h"
#include "les/model/context.h"
#include "les/sched/budget.h"
#include "les/sched/streaming_experts.h"
#include "les/session/generate.h"
#include "les/spec/make_drafter.h"
#include "les/storage/device_probe.h"
#include "les/tokenizer/tokenizer.h"

namespace les {

class ChatTemplate;
namespace vision {
class Mmproj;
class VisionEncoder;
struct ImageU8;
struct ImageMarkers;
struct ImageChunk;
}  // namespace vision

// The text that stands for an image in a prompt given to Engine::media_prompt (llama.cpp's mtmd
// marker).
inline constexpr std::string_view kImageMarker = "<__media__>";

// A prompt with images: text tokens and Context::kEmbeddingRow placeholders (one per visual
// token), with the visual tokens' rows [n_rows][n_embd] in order.
struct MediaPrompt {
  std::vector<int32_t> tokens;
  std::vector<float> rows;
  int64_t n_rows = 0;
  int n_images = 0;
  double encode_seconds = 0;   // preprocessing and encoding of the images
};

struct EngineOptions {
  std::string model_path;
  // Hard memory budget in bytes: dense weights resident, experts streamed through a cache sized by
  // plan_budget. 0: chosen (memory_choice.h): resident when the model fits in the memory available
  // to the process, else streamed within an automatic budget. mem_auto says the same explicitly.
  uint64_t mem = 0;
  bool mem_auto = false;
  // Forces a resident model (map or read, model.h); automatic: the choice above.
  ResidentMemory resident = ResidentMemory::automatic;
  // The machine's memory facts for the choice (tests inject some); unset: this machine's.
  std::optional<MemoryFacts> memory_facts;
  // With mem: the schedule, I/O mode, policy, prefetch knobs (cache_bytes and withheld_bytes are
  // set by the engine from the budget).
  StreamingOptions streaming;
  ContextParams context;   // n_ctx 0: chosen to fit (memory_choice.h)
  // Speculative decoding: drafter.kind "none" or empty = plain decoding. n_threads, n_ctx and
  // sampling are filled in by the engine.
  DrafterOptions drafter;
  // Builds the drafter instead of `drafter` when set (benchmark instruments such as the oracle
  // drafter); may return null.
  std::function<std::unique_ptr<Drafter>(const Model&)> drafter_factory;
  DepthParams depth;
  float draft_p_min = 0.0f;
  // Reuse the KV cache for the prefix a prompt shares with the previous request (plain decoding
  // only: with a drafter every request starts from an empty context).
  bool reuse_prefix = true;
  // With mem: get the device probe of the experts' disk at start (cached per device; measured,
  // seconds, when not cached): needed for streaming.read_chunk_auto and the I/O ceiling
  // (io_ceiling_tps). probe_refresh measures again even when cached.
  bool probe_io = false;
  bool probe_refresh = false;
  bool probe_quick = false;  // a short, uncached probe (tests)
  // Images in: a MiniCPM-V vision encoder (mmproj GGUF, projector type minicpmv4_6) whose output
  // width is the model's n_embd, and the visual-token compression (4 or 16; 0: the file's).
  std::string mmproj_path;
  int image_compression = 0;
  // Batched serving (engine/batch_generator.h): this many slot contexts, each with its own KV
  // cache (all counted in the budget), sharing the model and the expert source. 1: the one
  // context generate() uses. Not with a drafter.
  int n_parallel = 1;
};

struct EngineRequest {
  int n_predict = -1;              // tokens to generate at most (< 0: until end of generation or context)
  SamplerParams sampling;
  bool stop_at_eog = true;
  std::vector<std::string> stop;   // stop strings: generation ends before the first one (not in the text)
  const std::atomic<bool>* cancel = nullptr;  // set from any thread: generation stops at the next token
  std::function<void(int32_t id)> on_token;   // every generated token, before its text (measurements)
};

struct EngineResult {
  GenerateStats stats;
  std::string text;               // everything the callback was given
  std::vector<int32_t> tokens;    // the generated tokens
  int n_prompt = 0;               // the whole prompt's tokens
  int n_reused = 0;               // of which taken from the previous request's KV cache
  int n_generated = 0;            // tokens generated (a stop string's tokens included)
  // "stop" (end of generation token or a stop string), "length" (n_predict or the context's end),
  // "cancelled" (the cancel flag or the callback).
  std::string finish_reason;
};

// Called with each new piece of text: whole UTF-8 characters, never a prefix of a stop string that
// may still complete. Return false to stop (finish_reason "cancelled").
using TextCallback = std::function<bool(std::string_view text)>;

class Engine {
 public:
  // Loads the model and builds everything. Throws les::Error (bad file, budget too small, bad
  // drafter). A chat template that does not parse is not an error here (see chat_template()).
  explicit Engine(EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Evaluates the prompt (throws les::Error when it does not fit the context) and generates.
  EngineResult generate(std::span<const int32_t> prompt, const EngineRequest& req, const TextCallback& on_text);
  // The same with images: the text before the last visual token is evaluated (images streamed
  // through the text model batch by batch, rows and text tokens alike), the rest is
  // generate()'s prompt. The KV cache is reused up to the first visual token at most. Throws
  // les::Error with a drafter (speculative decoding takes text prompts only).
  EngineResult generate(const MediaPrompt& prompt, const EngineRequest& req, const TextCallback& on_text);

  // Images in (EngineOptions::mmproj_path): text in which each kImageMarker stands for the next
  // image, tokenized as tokenize_chat (chat: a rendered chat prompt, special tokens parsed) or
  // tokenize (the BOS rule) does it, each marker replaced by the image's tokens (vision/image_prompt.h).
  // Throws les::Error without a vision encoder or when markers and images differ in number.
  MediaPrompt media_prompt(std::string_view text, std::span<const vision::ImageU8> images, bool chat);
  bool has_vision() const { return mmproj_ != nullptr; }
  const vision::Mmproj* mmproj() const { return mmproj_.get(); }

  // Text -> tokens as `les run` does (the model's BOS rule; special tokens parsed when
  // parse_special, e.g. for a rendered chat prompt).
  std::vector<int32_t> tokenize(std::string_view text, bool parse_special) const;
  // The model's chat template (tokenizer.chat_template, ChatML when it has none) applied to
  // OpenAI-style messages, then tokenized. Throws les::Error for messages the template rejects.
  std::string render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                          const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  std::vector<int32_t> tokenize_chat(const std::string& rendered) const;

  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  // Null when the file's template could not be parsed (chat_template_error() says why): the
  // engine still runs plain prompts, and render_chat throws that error.
  const ChatTemplate* chat_template() const { return chat_.get(); }
  const std::string& chat_template_error() const { return chat_error_; }
  StreamingExperts* experts() { return experts_.get(); }
  const StreamingExperts* experts() const { return experts_.get(); }
  const Drafter* drafter() const { return drafter_.get(); }
  const BudgetPlan& budget() const { return plan_; }  // all zero when resident
  // Where memory went and why (mode, budget, context): the one line front ends print.
  const MemoryChoice& memory_choice() const { return choice_; }
  bool streaming() const { return experts_ != nullptr; }
  // The device probe (with mem and probe_io or read_chunk_auto), else null; the read chunk in use.
  const storage::DeviceProbe* device_probe() const { return probe_ ? &*probe_ : nullptr; }
  bool device_probe_cached() const { return probe_cached_; }
  uint64_t read_chunk() const { return read_chunk_; }
  // The device's MB/s at this engine's queue depth while the cores compute and with idle cores
  // (the probe's rates); zero without a probe.
  storage::DiskRates io_rates() const;
  int n_ctx() const { return ctx_->n_ctx(); }
  // The context generate() uses: for tools that evaluate token windows themselves or attach
  // observers (les trace); generate() rolls it back as it needs.
  Context& context() { return *ctx_; }
  const EngineOptions& options() const { return opts_; }
  // The slot contexts of batched serving (EngineOptions::n_parallel); slot 0 is context(), so
  // generate() must not run while a BatchGenerator over this engine has requests.
  int n_parallel() const { return 1 + static_cast<int>(slot_ctx_.size()); }
  Context& slot_context(int i) { return i == 0 ? *ctx_ : *slot_ctx_.at(static_cast<size_t>(i - 1)); }

 private:
  // Generates after what the context holds, with suffix as the rest of the prompt.
  EngineResult run_generation(const std::vector<int32_t>& suffix, const EngineRequest& req, const TextCallback& on_text);

  EngineOptions opts_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> chat_;
  std::string chat_error_;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<DepthController> depth_;
  std::unique_ptr<StreamingExperts> experts_;
  std::unique_ptr<ExpertSource> shared_resident_;  // resident experts of several slot contexts
  std::unique_ptr<Context> ctx_;
  std::vector<std::unique_ptr<Context>> slot_ctx_;  // slots 1.. of batched serving
  MemoryChoice choice_;
  BudgetPlan plan_;
  std::optional<storage::DeviceProbe> probe_;
  bool probe_cached_ = false;
  uint64_t read_chunk_ = 0;
  std::unique_ptr<vision::Mmproj> mmproj_;
  std::unique_ptr<vision::VisionEncoder> vision_;
  std::unique_ptr<vision::ImageMarkers> markers_;
  // Encoded images, most recent first (hash of the pixels and compression -> chunk).
  std::vector<std::pair<uint64_t, vision::ImageChunk>> image_cache_;
  const vision::ImageChunk& encoded_image(const vision::ImageU8& img);
};

}  // namespace les
