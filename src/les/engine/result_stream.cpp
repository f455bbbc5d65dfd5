#include "les/engine/result_stream.h"

namespace les {

ResultStream::ResultStream(const EngineRequest& req, const TextCallback& on_text)
    : req_(req), on_text_(on_text), stream_(req.stop) {}

bool ResultStream::emit(const std::string& s) {
  if (s.empty()) return true;
  r_.text += s;
  return on_text_ ? on_text_(s) : true;
}

bool ResultStream::on_token(int32_t id, const std::string& piece) {
  // A cancel that came while this token was computed drops it: nothing after the request to stop
  // is shown (the token was computed, so it is counted).
  ++r_.n_generated;
  if (req_.cancel && req_.cancel->load(std::memory_order_relaxed)) {
    cancelled_ = true;
    return false;
  }
  r_.tokens.push_back(id);
  if (req_.on_token) req_.on_token(id);
  if (!emit(stream_.push(piece))) {
    cancelled_ = true;
    return false;
  }
  return !stream_.stopped();
}

EngineResult ResultStream::finish(const GenerateStats& stats) {
  r_.stats = stats;
  if (!cancelled_) emit(stream_.finish());
  if (cancelled_) r_.finish_reason = "cancelled";
  else if (stream_.stopped() || stats.stop_reason == "eog") r_.finish_reason = "stop";
  else r_.finish_reason = "length";
  return std::move(r_);
}

}  // namespace les
