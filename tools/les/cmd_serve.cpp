// `les serve`: the OpenAI-compatible server (src/les/server) over one model.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine_flags.h"
#include "les/server/server.h"
#include "les/util/error.h"

namespace les::cli {

int cmd_serve(int argc, char** argv) {
  Args a("serve",
         "an OpenAI-compatible HTTP server: les serve -m FILE [--mem 3G] [--host 127.0.0.1] [--port 8080] "
         "[--api-key KEY] [-c N]\n"
         "  POST /v1/chat/completions, /v1/completions (stream: true for server-sent events); GET /v1/models, "
         "/health, /metrics",
         with_flags({{{"--host"}, true, "address to listen on (default 127.0.0.1)", "ADDR"},
                     {{"--port"}, true, "port (default 8080; 0 = any free port, printed at start)", "N"},
                     {{"--api-key"}, true, "require 'Authorization: Bearer KEY' (default: $LES_API_KEY if set)", "KEY"},
                     {{"--alias"}, true, "the model's id in /v1/models and requests (default: the file's name)", "NAME"},
                     {{"--queue"}, true, "requests that may wait for their turn; more get 503 (default 64)", "N"},
                     {{"--parallel", "-np"}, true, "requests generated together, each in a slot with its own KV cache "
                      "(all counted in the memory budget), one batched evaluation per step; not with --spec (default 1)", "N"}},
                    engine_flag_specs()));
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);

  server::ServerOptions so;
  so.host = a.str("--host", "127.0.0.1");
  const int64_t port = a.i64("--port", 8080);
  if (port < 0 || port > 65535) throw Error("--port must be in [0, 65535]");
  so.port = static_cast<int>(port);
  const char* env_key = std::getenv("LES_API_KEY");
  so.api_key = a.str("--api-key", env_key ? env_key : "");
  const int64_t queue = a.i64("--queue", 64);
  if (queue < 1 || queue > 4096) throw Error("--queue must be in [1, 4096]");
  so.max_waiting = static_cast<int>(queue);
  EngineOptions eo = engine_options_from(a);
  const int64_t parallel = a.i64("--parallel", 1);
  if (parallel < 1 || parallel > 256) throw Error("--parallel must be in [1, 256]");
  eo.n_parallel = static_cast<int>(parallel);
  so.model_name = a.str("--alias", std::filesystem::path(eo.model_path).filename().string());

  // Signals are taken by one watcher thread (blocked everywhere else, before any thread starts):
  // SIGINT / SIGTERM stop the server; a client gone mid-write must not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  Engine engine(std::move(eo));
  print_memory_choice(engine);
  if (!engine.chat_template()) {
    std::fprintf(stderr, "les serve: warning: %s; /v1/chat/completions will answer 500, /v1/completions works\n",
                 engine.chat_template_error().c_str());
  }
  server::Server srv(engine, so);
  const int bound = srv.bind();
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    srv.stop();
  });
  std::fprintf(stderr, "les serve: model '%s', context %d tokens%s, %s; listening on http://%s:%d\n",
               so.model_name.c_str(), engine.n_ctx(),
               engine.n_parallel() > 1 ? strfmt(" in each of %d slots", engine.n_parallel()).c_str() : "",
               engine.options().mem > 0 ? ("memory budget " + human_bytes(engine.budget().total)).c_str()
                                        : "experts resident",
               so.host.c_str(), bound);
  std::fflush(stderr);
  srv.run();
  pthread_kill(watcher.native_handle(), SIGTERM);  // wakes the watcher if run() ended otherwise
  watcher.join();
  std::fprintf(stderr, "les serve: stopped\n");
  return 0;
}

}  // namespace les::cli
