// OpenAI-style request bodies (/v1/chat/completions, /v1/completions) parsed and validated into
// one CompletionRequest. Anything malformed throws ApiError with the HTTP status and a message
// naming the field; no input makes the parser crash or allocate without bound (the body's size
// is capped by the server before it gets here).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "les/sample/sampler.h"

namespace les::server {

// An error answered with an OpenAI-style JSON body: {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const char* type() const;  // invalid_request_error, authentication_error, ...
 private:
  int status_;
  std::string param_;
};

enum class Endpoint { chat, completion };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;                     // empty: not given
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
  // chat: the messages, content normalised to strings; completion: unused.
  nlohmann::ordered_json messages;
  // chat: the images of image_url content parts (the bytes of their data: URLs), in order; each
  // stands at a kImageMarker ("<__media__>") in its message's content.
  std::vector<std::string> images;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs, tools
  // completion: the prompt as text, or as token ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  int max_tokens = -1;                   // -1: until end of generation or context
  SamplerParams sampling;
  bool seed_given = false;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

// Parses a body for the endpoint. Throws ApiError(400) for malformed JSON, unknown values, fields
// of the wrong type or out of range, and unsupported features (n > 1, logprobs, content parts other
// than text and image_url, image URLs other than base64 data: URLs).
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body);

// The bytes of a base64 data: URL ("data:image/png;base64,..."). Throws ApiError(400) naming
// param for any other URL (remote URLs are not fetched) or malformed base64.
std::string decode_data_url(std::string_view url, const std::string& param);

}  // namespace les::server
