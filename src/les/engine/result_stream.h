// One request's generated tokens turned into its EngineResult: the cancel flag, the token record,
// stop strings (TextStream), the text callback and the finish reason. Engine::generate and the
// batched generator feed it the same way, so a request ends the same way in both.
#pragma once

#include <cstdint>
#include <string>

#include "les/engine/engine.h"
#include "les/engine/text_stream.h"

namespace les {

class ResultStream {
 public:
  // req and on_text must outlive this.
  ResultStream(const EngineRequest& req, const TextCallback& on_text);

  // A generated token and its text (a TokenCallback's body). Returns false when generation must
  // stop: the cancel flag was set (the token is counted but dropped), the callback refused the
  // text, or a stop string completed.
  bool on_token(int32_t id, const std::string& piece);
  // Ends the request with the generation's stats: the text still held is given out unless
  // cancelled, and finish_reason set. Returns the result (call once).
  EngineResult finish(const GenerateStats& stats);
  // Ends the request as cancelled without another token (a client gone before or between steps).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  bool emit(const std::string& s);
  const EngineRequest& req_;
  const TextCallback& on_text_;
  TextStream stream_;
  EngineResult r_;
  bool cancelled_ = false;
};

}  // namespace les
