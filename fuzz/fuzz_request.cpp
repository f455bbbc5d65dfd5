// Fuzz target: the server's request parser on arbitrary bytes. The first byte picks the endpoint;
// the rest is the body. Contract (api_request.h): parsing either succeeds or throws ApiError with
// a 4xx status and a message; never another exception, a crash or unbounded work. A parsed
// request's fields are in range, and its responses and stream chunks serialise (invalid UTF-8
// replaced). The stop strings then run through TextStream with the body's bytes as pieces: what
// it emits never contains a stop string.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "les/engine/text_stream.h"
#include "les/server/api_request.h"
#include "les/server/api_response.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_request: postcondition failed: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace les::server;
  if (size == 0) return 0;
  const Endpoint e = (data[0] & 1) ? Endpoint::completion : Endpoint::chat;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  CompletionRequest r;
  try {
    r = parse_completion_request(e, body);
  } catch (const ApiError& err) {
    require(err.status() >= 400 && err.status() < 500, "a parse error is a 4xx");
    require(err.what()[0] != '\0', "a parse error has a message");
    (void)dump_json(error_body(err));
    return 0;
  }
  require(r.max_tokens >= -1, "max_tokens in range");
  require(r.sampling.temp >= 0 && r.sampling.top_p > 0 && r.sampling.top_p <= 1, "sampling in range");
  require(r.sampling.top_k >= 0 && r.sampling.min_p >= 0 && r.sampling.min_p <= 1, "sampling in range");
  require(r.stop.size() <= 16, "at most 16 stop strings");
  require(e == Endpoint::completion || (r.messages.is_array() && !r.messages.empty()), "chat has messages");
  const ResponseIdentity id = new_identity(e, "m");
  const Usage u{3, 4, 1};
  std::string text(body.substr(0, 64));
  (void)dump_json(completion_response(e, id, text, "stop", u));
  (void)sse_event(stream_chunk(e, id, text, "length", &u));
  if (r.messages.is_array()) (void)dump_json(r.messages);

  les::TextStream ts(r.stop);
  std::string out;
  for (size_t i = 0; i < body.size(); i += 3) out += ts.push(body.substr(i, 3));
  out += ts.finish();
  for (const std::string& s : r.stop) {
    require(s.empty() || out.find(s) == std::string::npos, "no stop string in the emitted text");
  }
  return 0;
}
