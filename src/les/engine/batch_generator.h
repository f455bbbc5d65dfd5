// Batched serving over an engine's slot contexts (EngineOptions::n_parallel): up to n_slots
// requests generate together. Each step evaluates, with one Context::eval_together, the next
// token of every decoding request and a chunk of the prompts still being evaluated (chunked
// prefill: n_batch tokens per step in all, at least one prompt token while a prompt waits; a
// long prompt continues in later steps while the others keep decoding).
//
// Each request keeps its own context (KV cache), sampler, stop strings and limits, with the
// semantics of Engine::generate (session/decode_loop.h and engine/result_stream.h are shared
// with it): its tokens, text, finish reason and final logits are those of the same request
// generated alone. A new request takes the free slot whose held tokens share the longest prefix
// with its prompt and rolls back to it (Engine::generate's prefix reuse). A request that ends
// (finished, cancelled or failed) frees its slot in the step it ends.
//
// Not thread-safe: one thread calls start and step (the server's stepping thread); the
// callbacks run on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "les/engine/engine.h"

namespace les {

// What one step evaluated.
struct BatchStepStats {
  int sequences = 0;       // requests that took part
  int decode_tokens = 0;   // one per decoding request
  int prompt_tokens = 0;   // prompt chunks' tokens
};

class BatchGenerator {
 public:
  explicit BatchGenerator(Engine& engine);
  ~BatchGenerator();
  BatchGenerator(const BatchGenerator&) = delete;
  BatchGenerator& operator=(const BatchGenerator&) = delete;

  int n_slots() const { return static_cast<int>(slots_.size()); }
  int n_busy() const;
  bool has_free_slot() const { return n_busy() < n_slots(); }
  bool idle() const { return n_busy() == 0; }

  // Starts a request in a free slot (the prompt is evaluated by the following steps). on_text
  // and req.on_token are called from step(); req.cancel is read at every step and every token.
  // Returns the request's id. Throws les::Error (nothing started) for an empty prompt, a prompt
  // longer than the context, or no free slot.
  uint64_t start(std::vector<int32_t> prompt, const EngineRequest& req, TextCallback on_text);

  struct Finished {
    uint64_t id = 0;
    EngineResult result;     // what Engine::generate would return (partial when failed)
    std::string error;       // non-empty: the request failed (e.g. non-finite logits)
  };
  // One step over the active requests; returns those that ended in it. Does nothing when idle.
  std::vector<Finished> step();
  const BatchStepStats& last_step() const { return last_; }

 private:
  struct Request;
  // Samples after the logits of r's context; ends r when generation stops there.
  void after_logits(Request& r, std::vector<Finished>& done);
  void end(Request& r, std::vector<Finished>& done, std::string error = {});

  Engine& engine_;
  std::vector<std::unique_ptr<Request>> slots_;  // [n_slots]: the request in each slot, or null
  uint64_t next_id_ = 1;
  uint64_t next_order_ = 0;
  BatchStepStats last_;
};

}  // namespace les
