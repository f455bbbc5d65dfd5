#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine_flags.h"
#include "les/engine/engine.h"
#include "les/sched/budget.h"
#include "les/sched/io_probe.h"
#include "les/sched/stream_report.h"
#include "les/sched/streaming_experts.h"
#include "les/spec/spec_report.h"
#include "les/trace/routing_recorder.h"
#include "les/util/error.h"
#include "les/util/meminfo.h"
#include "les/util/hash.h"
#include "les/util/clock.h"
#include "les/vision/image.h"
#include "les/vision/image_decode.h"

namespace les::cli {

int cmd_run(int argc, char** argv) {
  Args a("run", "generate text: les run -m FILE -p PROMPT [-n N] [-t T] [--temp T] [--seed S]",
         with_flags(with_flags({{{"-p", "--prompt"}, true, "prompt text", "TEXT"},
                                {{"-f", "--file"}, true, "read the prompt from a file", "FILE"},
                                {{"-n", "--n-predict"}, true, "tokens to generate (default 128, -1 = until end)", "N"},
                                {{"--chat"}, false, "wrap the prompt as one user message in the model's chat template "
                                                    "(tokenizer.chat_template; ChatML when it has none)"},
                                {{"--ignore-eos"}, false, "keep generating past end-of-generation tokens"},
                                {{"--no-display-prompt"}, false, "do not echo the prompt"},
                                {{"--stats"}, false, "print expert streaming and speculation statistics at the end"},
                                {{"--stats-json"}, true, "write expert streaming statistics as JSON", "FILE"},
                                {{"--image"}, true, "an image for the prompt (with --mmproj; may repeat): placed "
                                                    "before the text, inside the user turn with --chat, as "
                                                    "llama-mtmd-cli places it", "IMG"},
                                {{"--trace-routing"}, true, "record the run's routing (prompt and generated tokens) as "
                                                           "PREFIX.routing-*.npy, as les trace writes it", "PREFIX"}},
                               engine_flag_specs()),
                    sampling_flag_specs()));
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);

  std::string prompt = a.str("--prompt");
  if (a.has("--file")) {
    std::ifstream f(a.str("--file"), std::ios::binary);
    if (!f) throw Error(strfmt("cannot read prompt file '%s'", a.str("--file").c_str()));
    std::stringstream ss;
    ss << f.rdbuf();
    prompt = ss.str();
  }
  if (!a.has("--prompt") && !a.has("--file")) throw Error("give a prompt with -p TEXT or -f FILE");

  EngineRequest req;
  req.n_predict = static_cast<int>(a.i64("--n-predict", 128));
  req.sampling = sampling_from(a);
  req.stop_at_eog = !a.has("--ignore-eos");
  EngineOptions eo = engine_options_from(a);
  eo.drafter.sampling = req.sampling;
  const bool speculating = eo.drafter.kind != "none";
  // --stats prints the decode ceiling, which needs the device probe (cached per device; taken only
  // when experts stream).
  if (a.has("--stats")) eo.probe_io = true;
  Engine engine(std::move(eo));
  print_memory_choice(engine);
  std::unique_ptr<RoutingRecorder> recorder;
  if (a.has("--trace-routing")) {
    if (speculating) throw Error("--trace-routing records plain decoding: drop --spec (verification batches would record rejected drafts)");
    recorder = std::make_unique<RoutingRecorder>(engine.model().config(), false);
    recorder->attach(engine.context());
    recorder->start_sequence();
  }
  if (a.has("--stats-json") && !engine.streaming()) {
    throw Error("--stats-json writes expert streaming statistics, and this run keeps the model resident");
  }
  StreamingExperts* experts = engine.experts();

  std::vector<int32_t> ids;
  MediaPrompt media;
  const std::vector<std::string> image_paths = a.all("--image");
  if (!image_paths.empty()) {
    if (!engine.has_vision()) throw Error("--image needs the model's vision encoder: give it with --mmproj");
    if (recorder) throw Error("--trace-routing records text prompts: drop --image");
    std::vector<vision::ImageU8> images;
    for (const std::string& p : image_paths) images.push_back(vision::decode_image_file(p));
    // One marker per image before the text (llama-mtmd-cli's placement), unless the prompt has them.
    std::string text = prompt;
    if (text.find(kImageMarker) == std::string::npos) {
      for (size_t i = 0; i < images.size(); ++i) text = std::string(kImageMarker) + text;
    }
    if (a.has("--chat")) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      messages.push_back({{"role", "user"}, {"content", text}});
      media = engine.media_prompt(engine.render_chat(messages, true), images, true);
    } else {
      media = engine.media_prompt(text, images, false);
    }
    std::fprintf(stderr, "les: %d image%s: %lld visual tokens, encoded in %.3f s\n", media.n_images,
                 media.n_images == 1 ? "" : "s", static_cast<long long>(media.n_rows), media.encode_seconds);
  } else if (a.has("--chat")) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", prompt}});
    ids = engine.tokenize_chat(engine.render_chat(messages, true));
  } else {
    ids = engine.tokenize(prompt, false);
  }
  if (!a.has("--no-display-prompt")) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  uint64_t bytes_at_first = 0;
  double stall_at_first = 0, time_at_first = 0;
  bool first = true;
  auto bytes_read = [&] {
    if (!experts) return uint64_t{0};
    const LayerStreamStats t = experts->stats().total();
    return t.bytes_demand + t.bytes_prefetch;
  };
  auto stall_s = [&] { return experts ? experts->stats().total().stall_s : 0.0; };
  // CPU time of this (the decoding) thread and of the whole process, user and system.
  struct Cpu {
    double thread_user = 0, thread_sys = 0, proc_user = 0, proc_sys = 0;
  };
  auto cpu = [] {
    auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
    rusage th{}, pr{};
    ::getrusage(RUSAGE_THREAD, &th);
    ::getrusage(RUSAGE_SELF, &pr);
    return Cpu{secs(th.ru_utime), secs(th.ru_stime), secs(pr.ru_utime), secs(pr.ru_stime)};
  };
  Cpu cpu_at_first;
  // The decode interval (for the ceiling): from the first generated token to the last.
  req.on_token = [&](int32_t) {
    if (!first) return;
    bytes_at_first = bytes_read();
    stall_at_first = stall_s();
    time_at_first = now_s();
    cpu_at_first = cpu();
    first = false;
  };
  const auto print_piece = [&](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  const double t_start = now_s();
  const EngineResult r = media.n_rows > 0 ? engine.generate(media, req, print_piece)
                                          : engine.generate(ids, req, print_piece);
  if (media.n_rows > 0 && !first) {
    std::fprintf(stderr, "\nles: time to first token %.3f s (image encoding %.3f s + prefill of %zu positions)\n",
                 time_at_first - t_start + media.encode_seconds, media.encode_seconds, media.tokens.size());
  }
  const GenerateStats& st = r.stats;
  if (recorder) {
    // The prompt and every generated token but the last (never evaluated).
    std::vector<int32_t> evaluated = ids;
    evaluated.insert(evaluated.end(), r.tokens.begin(), r.tokens.end());
    evaluated.resize(std::min(evaluated.size(), static_cast<size_t>(recorder->n_tokens())));
    recorder->add_tokens(evaluated);
    engine.context().set_routing_observer(nullptr);
    recorder->save(a.str("--trace-routing"));
    std::fprintf(stderr, "les: routing of %d tokens written to %s.routing-*.npy\n", recorder->n_tokens(),
                 a.str("--trace-routing").c_str());
  }
  std::fputc('\n', stdout);
  std::fprintf(stderr,
               "\nprompt: %d tokens in %.3f s (%.1f tok/s) | decode: %d tokens, %.1f tok/s | stop: %s\n"
               "final logits hash: %s\n",
               st.n_prompt, st.prompt_seconds, st.prompt_tps(), st.n_generated, st.gen_tps(), st.stop_reason.c_str(),
               hex64(st.final_logits_hash).c_str());
  if (speculating && a.has("--stats")) {
    std::fprintf(stderr, "%s", format_spec_stats(st, bytes_read() - bytes_at_first).c_str());
  }
  if (experts) {
    RunSummary rs;
    rs.decode_tps = st.gen_tps();
    rs.prompt_tps = st.prompt_tps();
    rs.wall_s = st.prompt_seconds + st.gen_seconds;
    rs.peak_rss = peak_rss_bytes();
    rs.budget = engine.budget().total;
    if (a.has("--stats")) {
      std::fprintf(stderr, "\n%s", format_stream_table(experts->stats(), rs).c_str());
      const double secs = now_s() - time_at_first;
      if (!first && st.n_generated > 1 && engine.io_rates().loaded_mbs > 0) {
        const IoCeiling c = io_ceiling(bytes_read() - bytes_at_first, stall_s() - stall_at_first, secs,
                                       static_cast<uint64_t>(st.n_generated - 1), engine.io_rates());
        std::fprintf(stderr, "%s", format_io_ceiling(c, engine.options().streaming.queue_depth).c_str());
        const Cpu c1 = cpu();
        const double n = static_cast<double>(st.n_generated - 1);
        std::fprintf(stderr,
                     "CPU per decoded token: decoding thread %.2f ms user + %.2f ms system; whole process %.2f ms user "
                     "+ %.2f ms system\n",
                     1e3 * (c1.thread_user - cpu_at_first.thread_user) / n, 1e3 * (c1.thread_sys - cpu_at_first.thread_sys) / n,
                     1e3 * (c1.proc_user - cpu_at_first.proc_user) / n, 1e3 * (c1.proc_sys - cpu_at_first.proc_sys) / n);
      }
      if (const storage::DeviceProbe* p = engine.device_probe()) {
        std::fprintf(stderr, "device probe: %s (%s%s), %s\n", p->device.c_str(),
                     engine.device_probe_cached() ? "cached" : "measured now", "; les probe shows it",
                     storage::read_shaping_name(engine.read_chunk()).c_str());
      }
    }
    if (a.has("--stats-json")) {
      const std::string js = stream_stats_json(experts->stats(), rs);
      write_file_atomic(a.str("--stats-json"), js.data(), js.size());
    }
  }
  return 0;
}

}  // namespace les::cli
