#include "engine_flags.h"

#include "les/cache/policy.h"
#include "les/model/kv_cache.h"
#include "les/util/error.h"

namespace les::cli {

std::vector<FlagSpec> with_flags(std::vector<FlagSpec> own, const std::vector<FlagSpec>& more) {
  own.insert(own.end(), more.begin(), more.end());
  return own;
}

std::vector<FlagSpec> engine_flag_specs() {
  return {
      {{"-m", "--model"}, true, "model file (GGUF)", "FILE"},
      {{"-t", "--threads"}, true, "threads (default 2)", "N"},
      {{"-c", "--ctx-size"}, true, "context size (default: the model's trained context, halved while its KV cache "
                                   "does not fit resident memory (down to 4096) or would take more than a quarter of "
                                   "what a streaming budget leaves for it and the experts)", "N"},
      {{"-b", "--batch-size"}, true, "prompt tokens per forward pass (default 256)", "N"},
      {{"-ctk", "--cache-type-k"}, true, "KV cache type of K: f16 (default), bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                                          "iq4_nl, or f32 (attention computed as llama.cpp does without flash "
                                          "attention; the other types as with it)", "TYPE"},
      {{"-ctv", "--cache-type-v"}, true, "KV cache type of V: the same types (default f16)", "TYPE"},
      {{"--isa"}, true, "kernel ISA: scalar, avx2, avxvnni, avx512 (default: best available)", "ISA"},
      {{"--mem"}, true, "hard memory budget, e.g. 3G: dense weights resident, experts streamed from storage "
                        "through an expert cache; auto (the default): the whole model resident when it fits in the "
                        "memory available to this process (MemAvailable, the memory cgroup's limit), else streamed "
                        "within that memory less max(128 MiB, 1/16 of it)", "SIZE|auto"},
      {{"--mmap"}, false, "keep the whole model resident, mapped from the file (starts at once and shares the page "
                          "cache, but on 4 KiB pages: slower products; a model larger than memory pages)", ""},
      {{"--no-mmap"}, false, "keep the whole model resident, read into memory on huge pages (the default for a model "
                             "that fits when the kernel has transparent huge pages)", ""},
      {{"--schedule"}, true, "expert schedule with --mem: lookahead (default) or ondemand", "S"},
      {{"--io"}, true, "expert reads with --mem: uring (default where the kernel allows it, else pread), pread, naive (buffered + copy)", "MODE"},
      {{"--policy"}, true, "expert cache eviction policy: lru, lfu, lrfu, arc, 2q, s3fifo, tinylfu, lpart, "
                           "each also as NAME+pred (default lrfu+pred)", "NAME"},
      {{"--predict-extra"}, true, "lookahead: prefetch the predicted top k+M experts (default 0)", "M"},
      {{"--no-refine"}, false, "lookahead: do not re-predict the next layer's experts from this layer's output", ""},
      {{"--no-refine-cancel"}, false, "lookahead: keep unstarted prefetches the refined prediction drops", ""},
      {{"--measure-ahead2"}, false, "lookahead: also measure a two-layers-ahead prediction (statistics only)", ""},
      {{"--throttle"}, false, "lookahead: skip guesses whose recent precision is below half the disk's busy fraction", ""},
      {{"--prefetch-ahead2"}, false, "lookahead: also prefetch the two-layers-ahead guess into the disk's idle time (speculative reads; pays when compute and I/O are balanced, costs when the disk is the bottleneck)", ""},
      {{"--prefetch-budget"}, true, "lookahead: prefetch bytes per token at most X times the demand (default 1.5)", "X"},
      {{"--queue-depth"}, true, "reads in flight (default 8)", "N"},
      {{"--prefetch-inflight"}, true, "lookahead: prefetch bytes in flight at most, bounding the wait they add to a miss (default: two experts)", "SIZE"},
      {{"--read-chunk"}, true, "with --mem: read each expert as aligned chunks of at most SIZE in flight at once "
                               "(e.g. 512K; default 0 = one read per extent), or auto: chunks where the device "
                               "probe says they read faster", "SIZE|auto"},
      {{"--no-register-buffers"}, false, "with --mem and --io uring: do not register the expert cache as io_uring "
                                         "fixed buffers (READ_FIXED)"},
      {{"--probe-refresh"}, false, "with --mem: measure the disk again (the device probe is cached per device and "
                                   "file system; les probe shows it)"},
      {{"--verify-reads"}, false, "with --mem: check each expert read against its checksum (a model packed by "
                                  "les pack); a mismatch is an error naming the layer and expert"},
      {{"--spec"}, true, "speculative decoding: none (default), draft (a small model, --draft FILE), dspark (a DSpark/dflash "
                         "block drafter reading the target's hidden states, --draft FILE), mtp (the model's own MTP head: qwen35moe, qwen3next, glm4moe), ngram (prompt lookup); lossless: greedy output is identical, sampling keeps the distribution", "KIND"},
      {{"--draft", "-md"}, true, "the draft model (--spec draft) or DSpark drafter (--spec dspark)", "FILE"},
      {{"--draft-max"}, true, "tokens drafted per round at most (default 6)", "N"},
      {{"--draft-min"}, true, "a round drafts at least N tokens or none (default 0)", "N"},
      {{"--draft-p-min"}, true, "cut a draft at the first token whose drafter confidence is below P (default 0)", "P"},
      {{"--mmproj"}, true, "images in: the model's vision encoder (mmproj GGUF of a MiniCPM-V 4.6/4.7 model, "
                           "projector type minicpmv4_6)", "FILE"},
      {{"--image-compression"}, true, "with --mmproj: visual tokens per 2x2 (4) or 4x4 (16) patches (default: the "
                                      "file's; 16 needs a file with the ViT merger)", "4|16"},
      {{"--spec-fixed"}, false, "always draft --draft-max tokens (default: load-aware depth, chosen each round from "
                                "measured acceptance and verification cost; 0 when speculation does not pay)"},
  };
}

std::vector<FlagSpec> sampling_flag_specs() {
  return {
      {{"--temp"}, true, "temperature (default 0.8; 0 = greedy)", "T"},
      {{"--top-k"}, true, "top-k sampling (default 40, 0 = off)", "K"},
      {{"--top-p"}, true, "top-p sampling (default 0.95, 1 = off)", "P"},
      {{"--min-p"}, true, "min-p sampling (default 0.05, 0 = off)", "P"},
      {{"--repeat-penalty"}, true, "repetition penalty (default 1.0 = off)", "X"},
      {{"--repeat-last-n"}, true, "tokens the penalty looks back (default 64)", "N"},
      {{"-s", "--seed"}, true, "random seed (default 42): same seed, same output", "S"},
  };
}

EngineOptions engine_options_from(const Args& a) {
  EngineOptions o;
  o.model_path = a.required("--model");
  o.context.n_threads = static_cast<int>(a.i64("--threads", 2));
  o.context.n_ctx = static_cast<int>(a.i64("--ctx-size", 0));
  o.context.n_batch = static_cast<int>(a.i64("--batch-size", 256));
  if (o.context.n_threads < 1 || o.context.n_threads > 256) throw Error("--threads must be in [1, 256]");
  if (o.context.n_ctx < 0) throw Error("--ctx-size must be >= 0");
  if (o.context.n_batch < 1) throw Error("--batch-size must be >= 1");
  o.context.type_k = parse_kv_type(a.str("--cache-type-k", "f16"), "--cache-type-k");
  o.context.type_v = parse_kv_type(a.str("--cache-type-v", "f16"), "--cache-type-v");
  o.mmproj_path = a.str("--mmproj", "");
  o.image_compression = static_cast<int>(a.i64("--image-compression", 0));
  if (a.has("--image-compression") && o.mmproj_path.empty()) throw Error("--image-compression needs --mmproj");
  if (a.has("--image-compression") && o.image_compression != 4 && o.image_compression != 16) {
    throw Error("--image-compression must be 4 or 16");
  }

  o.drafter.kind = a.str("--spec", "none");
  o.drafter.draft_path = a.str("--draft", "");
  if (o.drafter.kind != "none") {
    o.depth.k_max = static_cast<int>(a.i64("--draft-max", 6));
    o.depth.k_min = static_cast<int>(a.i64("--draft-min", 0));
    o.depth.adaptive = !a.has("--spec-fixed");
    o.draft_p_min = static_cast<float>(a.f64("--draft-p-min", 0.0));
    if (o.depth.k_max < 1 || o.depth.k_max > 64) throw Error("--draft-max must be in [1, 64]");
    if (o.depth.k_min < 0 || o.depth.k_min > o.depth.k_max) throw Error("--draft-min must be in [0, --draft-max]");
    if (o.draft_p_min < 0 || o.draft_p_min > 1) throw Error("--draft-p-min must be in [0, 1]");
  } else {
    for (const char* f : {"--draft", "--draft-max", "--draft-min", "--draft-p-min", "--spec-fixed"}) {
      if (a.has(f)) throw Error(strfmt("%s needs --spec", f));
    }
  }

  if (a.has("--mmap") && a.has("--no-mmap")) throw Error("--mmap and --no-mmap exclude each other");
  const std::string mem = a.str("--mem", "auto");
  const bool forced_resident = a.has("--mmap") || a.has("--no-mmap");
  if (a.has("--mem") && forced_resident) {
    throw Error(strfmt("--%s keeps the whole model resident; it excludes --mem (experts streamed)",
                       a.has("--mmap") ? "mmap" : "no-mmap"));
  }
  if (a.has("--mmap")) o.resident = ResidentMemory::map;
  if (a.has("--no-mmap")) o.resident = ResidentMemory::read;
  if (mem == "auto") {
    o.mem_auto = a.has("--mem");
  } else {
    o.mem = parse_size(mem, "--mem");
    if (o.mem == 0) throw Error("--mem must be more than 0");
  }

  // The streaming flags apply whenever experts stream: with --mem, or when the automatic choice
  // streams a model that does not fit.
  static const char* kStreamingFlags[] = {"--schedule", "--io", "--policy", "--predict-extra", "--prefetch-budget",
                                          "--queue-depth", "--prefetch-inflight", "--no-refine", "--no-refine-cancel",
                                          "--measure-ahead2", "--prefetch-ahead2", "--throttle", "--verify-reads",
                                          "--read-chunk", "--probe-refresh", "--no-register-buffers"};
  if (forced_resident) {
    for (const char* f : kStreamingFlags) {
      if (a.has(f)) throw Error(strfmt("%s applies to streamed experts, not with --%s", f, a.has("--mmap") ? "mmap" : "no-mmap"));
    }
  }
  StreamingOptions& so = o.streaming;
  so.schedule = parse_schedule(a.str("--schedule", "lookahead"));
  so.io_mode = storage::parse_io_mode(a.str("--io", storage::io_mode_name(storage::default_io_mode())));
  so.policy = a.str("--policy", cache::kDefaultPolicy);
  so.predict_extra = static_cast<int>(a.i64("--predict-extra", 0));
  so.prefetch_budget = a.f64("--prefetch-budget", 1.5);
  so.queue_depth = static_cast<int>(a.i64("--queue-depth", 8));
  if (a.has("--prefetch-inflight")) so.prefetch_inflight = parse_size(a.str("--prefetch-inflight"), "--prefetch-inflight");
  so.verify_reads = a.has("--verify-reads");
  if (a.has("--read-chunk")) {
    if (a.str("--read-chunk") == "auto") {
      so.read_chunk_auto = true;
    } else {
      so.read_chunk = parse_size(a.str("--read-chunk"), "--read-chunk");
    }
  }
  so.register_buffers = !a.has("--no-register-buffers");
  o.probe_refresh = a.has("--probe-refresh");
  o.probe_io = o.probe_refresh;
  so.refine = !a.has("--no-refine");
  so.refine_cancel = !a.has("--no-refine-cancel");
  so.measure_ahead2 = a.has("--measure-ahead2");
  so.prefetch_ahead2 = a.has("--prefetch-ahead2");
  so.throttle = a.has("--throttle");
  if (so.queue_depth < 1 || so.queue_depth > 1024) throw Error("--queue-depth must be in [1, 1024]");
  if (so.predict_extra < 0) throw Error("--predict-extra must be >= 0");
  return o;
}

SamplerParams sampling_from(const Args& a) {
  SamplerParams s;
  s.temp = static_cast<float>(a.f64("--temp", 0.8));
  s.top_k = static_cast<int>(a.i64("--top-k", 40));
  s.top_p = static_cast<float>(a.f64("--top-p", 0.95));
  s.min_p = static_cast<float>(a.f64("--min-p", 0.05));
  s.repeat_penalty = static_cast<float>(a.f64("--repeat-penalty", 1.0));
  s.repeat_last_n = static_cast<int>(a.i64("--repeat-last-n", 64));
  s.seed = static_cast<uint64_t>(a.i64("--seed", 42));
  if (s.top_p <= 0 || s.top_p > 1) throw Error("--top-p must be in (0, 1]");
  if (s.min_p < 0 || s.min_p > 1) throw Error("--min-p must be in [0, 1]");
  if (s.top_k < 0) throw Error("--top-k must be >= 0");
  if (s.repeat_penalty <= 0) throw Error("--repeat-penalty must be > 0");
  return s;
}

}  // namespace les::cli
