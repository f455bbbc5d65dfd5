// `les chat`: an interactive chat in the terminal. Each turn renders the whole conversation with
// the model's chat template; the engine reuses the KV cache for the part already evaluated, so a
// turn costs only its new tokens. Ctrl-C stops a reply (the partial reply stays in the history);
// Ctrl-D or /exit ends the program.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <string>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine_flags.h"
#include "les/engine/engine.h"
#include "les/vision/image.h"
#include "les/vision/image_decode.h"
#include "les/util/error.h"

namespace les::cli {

namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

enum class LineRead { line, eof, interrupted };

// One line from stdin without stdio buffering, so that Ctrl-C (EINTR) is seen at once.
LineRead read_line(std::string& out) {
  out.clear();
  for (;;) {
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) {
      if (c == '\n') return LineRead::line;
      out.push_back(c);
      continue;
    }
    if (n == 0) return out.empty() ? LineRead::eof : LineRead::line;
    if (errno == EINTR) {
      if (g_interrupted.exchange(false)) return LineRead::interrupted;
      continue;
    }
    return LineRead::eof;
  }
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  Args a("chat",
         "an interactive chat: les chat -m FILE [--system TEXT] [--mem 3G] ...\n"
         "  type a message and Enter; Ctrl-C stops a reply; /reset forgets the conversation; /exit or Ctrl-D quits;\n"
         "  with --mmproj, /image PATH adds an image to your next message",
         with_flags(with_flags({{{"--system"}, true, "a system message that starts the conversation", "TEXT"},
                                {{"-n", "--n-predict"}, true, "tokens per reply at most (default -1 = until the model ends it)", "N"},
                                {{"--ignore-eos"}, false, "keep generating past end-of-generation tokens (up to -n)"},
                                {{"--no-color"}, false, "do not color the prompt marker"}},
                               engine_flag_specs()),
                    sampling_flag_specs()));
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);

  EngineRequest req;
  req.n_predict = static_cast<int>(a.i64("--n-predict", -1));
  req.sampling = sampling_from(a);
  req.stop_at_eog = !a.has("--ignore-eos");
  EngineOptions eo = engine_options_from(a);
  eo.drafter.sampling = req.sampling;
  Engine engine(std::move(eo));
  if (!engine.chat_template()) throw Error(engine.chat_template_error());
  print_memory_choice(engine);

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read waiting for input returns EINTR
  sigaction(SIGINT, &sa, nullptr);
  req.cancel = &g_interrupted;

  const bool color = !a.has("--no-color") && ::isatty(STDOUT_FILENO);
  const char* marker = color ? "\033[1;32m> \033[0m" : "> ";
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  // Images of the conversation, in the order of their markers in the history; the next
  // message's images (added by /image) come first in it.
  std::vector<vision::ImageU8> images;
  size_t pending_images = 0;
  const auto reset = [&] {
    history = nlohmann::ordered_json::array();
    images.clear();
    pending_images = 0;
    if (a.has("--system")) history.push_back({{"role", "system"}, {"content", a.str("--system")}});
  };
  reset();
  std::fprintf(stderr, "les chat: context %d tokens. Ctrl-C stops a reply, /reset forgets, /exit or Ctrl-D quits.\n",
               engine.n_ctx());
  std::string line;
  for (;;) {
    std::fputs(marker, stdout);
    std::fflush(stdout);
    const LineRead got = read_line(line);
    if (got == LineRead::eof) {
      std::fputc('\n', stdout);
      break;
    }
    if (got == LineRead::interrupted) {
      std::fputs("\n(Ctrl-D or /exit quits)\n", stdout);
      continue;
    }
    const std::string msg = trim(line);
    if (msg.empty()) continue;
    if (msg == "/exit" || msg == "/quit") break;
    if (msg == "/reset") {
      reset();
      std::fputs("(conversation forgotten)\n", stdout);
      continue;
    }
    if (msg.rfind("/image", 0) == 0 && (msg.size() == 6 || msg[6] == ' ')) {
      const std::string path = trim(msg.substr(6));
      try {
        if (!engine.has_vision()) throw Error("this chat takes no images: start it with --mmproj FILE");
        if (path.empty()) throw Error("usage: /image PATH");
        images.push_back(vision::decode_image_file(path));
        ++pending_images;
        std::fprintf(stderr, "(image %dx%d added to your next message)\n", images.back().width, images.back().height);
      } catch (const Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
      }
      continue;
    }
    // The message's images go before its text, as llama-mtmd-cli places them.
    std::string content;
    for (size_t i = 0; i < pending_images; ++i) content += kImageMarker;
    history.push_back({{"role", "user"}, {"content", content + msg}});
    std::vector<int32_t> prompt;
    MediaPrompt media;
    try {
      const std::string rendered = engine.render_chat(history, true);
      if (images.empty()) {
        prompt = engine.tokenize_chat(rendered);
      } else {
        media = engine.media_prompt(rendered, images, true);
      }
      const size_t n = images.empty() ? prompt.size() : media.tokens.size();
      if (static_cast<int>(n) >= engine.n_ctx()) {
        throw Error(strfmt("the conversation has %zu tokens and the context holds %d: /reset, or start with a larger -c",
                           n, engine.n_ctx()));
      }
    } catch (const Error& e) {
      history.erase(history.size() - 1);
      std::fprintf(stderr, "error: %s\n", e.what());
      continue;
    }
    const size_t added = pending_images;
    pending_images = 0;
    g_interrupted.store(false);
    const auto print = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    EngineResult r;
    try {
      r = images.empty() ? engine.generate(prompt, req, print) : engine.generate(media, req, print);
    } catch (const Error& e) {
      history.erase(history.size() - 1);
      pending_images = added;  // they go with the next message
      std::fprintf(stderr, "error: %s\n", e.what());
      continue;
    }
    if (r.finish_reason == "cancelled") std::fputs(" [stopped]", stdout);
    else if (r.finish_reason == "length") std::fputs(" [length limit]", stdout);
    std::fputc('\n', stdout);
    g_interrupted.store(false);
    history.push_back({{"role", "assistant"}, {"content", r.text}});
  }
  return 0;
}

}  // namespace les::cli
