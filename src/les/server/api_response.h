// OpenAI-style response bodies: whole responses, stream chunks, errors, the model list.
// Every text is serialised with invalid UTF-8 replaced (U+FFFD), never an exception.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "les/server/api_request.h"

namespace les::server {

struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// Identity of one response: its id ("chatcmpl-..." / "cmpl-..."), creation time, model name.
struct ResponseIdentity {
  std::string id;
  int64_t created = 0;
  std::string model;
};
ResponseIdentity new_identity(Endpoint e, const std::string& model);

std::string dump_json(const nlohmann::ordered_json& j);

// The whole (non-streamed) response.
nlohmann::ordered_json completion_response(Endpoint e, const ResponseIdentity& id, const std::string& text,
                                           const std::string& finish_reason, const Usage& u);
// One stream chunk: a text delta (finish_reason empty) or the last one (finish_reason set, usage
// given). The chat stream's first chunk carries the role: role_chunk.
nlohmann::ordered_json stream_chunk(Endpoint e, const ResponseIdentity& id, const std::string& text,
                                    const std::string& finish_reason = {}, const Usage* usage = nullptr);
nlohmann::ordered_json role_chunk(const ResponseIdentity& id);
// stream_options.include_usage: a chunk with no choices and the usage.
nlohmann::ordered_json usage_chunk(Endpoint e, const ResponseIdentity& id, const Usage& u);
// "data: <json>\n\n"
std::string sse_event(const nlohmann::ordered_json& j);

nlohmann::ordered_json error_body(const ApiError& e);
nlohmann::ordered_json usage_json(const Usage& u);

}  // namespace les::server
