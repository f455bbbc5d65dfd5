// `les serve`: an OpenAI-compatible HTTP server over one Engine.
//   POST /v1/chat/completions, /v1/completions (streamed as server-sent events or not)
//   GET  /v1/models, /health, /metrics (Prometheus text)
// Requests run first come first served: one at a time, or with an engine of n_parallel slots
// (les serve --parallel N) up to N together, each step one batched evaluation of their tokens
// (engine/batch_generator.h); at most max_waiting wait (more get 503 with Retry-After). A client that disconnects cancels its generation. Errors are OpenAI-style
// JSON with the fitting status: 400 bad request, 401 wrong key, 404 unknown model or route,
// 413 body too large, 503 queue full.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "les/engine/engine.h"

namespace les::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              // 0: any free port (bind() returns it)
  std::string api_key;          // non-empty: /v1/* and /metrics need "Authorization: Bearer KEY"
  std::string model_name;       // the id /v1/models lists and requests may name
  int max_waiting = 64;         // requests waiting for their turn at most
  size_t max_body_bytes = size_t(8) << 20;
  int heartbeat_ms = 1000;      // while waiting or generating, a keep-alive write this often (detects gone clients)
};

class Server {
 public:
  Server(Engine& engine, ServerOptions opts);
  ~Server();
  // Binds the listening socket; returns the port. Throws les::Error when it cannot.
  int bind();
  // Serves until stop() (from another thread). Returns when the listener is closed.
  void run();
  // Stops accepting, cancels the running generation, makes run() return. Thread-safe.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace les::server
