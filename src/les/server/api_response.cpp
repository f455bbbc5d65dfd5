#include "les/server/api_response.h"

#include <ctime>
#include <random>

#include "les/util/error.h"

namespace les::server {

using json = nlohmann::ordered_json;

ResponseIdentity new_identity(Endpoint e, const std::string& model) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  ResponseIdentity r;
  r.id = strfmt("%s%016llx", e == Endpoint::chat ? "chatcmpl-" : "cmpl-", static_cast<unsigned long long>(rng()));
  r.created = static_cast<int64_t>(std::time(nullptr));
  r.model = model;
  return r;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

json usage_json(const Usage& u) {
  json j = json::object();
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = json{{"cached_tokens", u.cached_tokens}};
  return j;
}

namespace {

json head(Endpoint e, const ResponseIdentity& id, bool chunk) {
  json j = json::object();
  j["id"] = id.id;
  j["object"] = e == Endpoint::chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  j["created"] = id.created;
  j["model"] = id.model;
  return j;
}

json finish(const std::string& reason) { return reason.empty() ? json() : json(reason); }

}  // namespace

json completion_response(Endpoint e, const ResponseIdentity& id, const std::string& text, const std::string& finish_reason,
                         const Usage& u) {
  json j = head(e, id, false);
  json c = json::object();
  c["index"] = 0;
  if (e == Endpoint::chat) {
    c["message"] = json{{"role", "assistant"}, {"content", text}};
  } else {
    c["text"] = text;
    c["logprobs"] = nullptr;
  }
  c["finish_reason"] = finish(finish_reason);
  j["choices"] = json::array({c});
  j["usage"] = usage_json(u);
  return j;
}

json role_chunk(const ResponseIdentity& id) {
  json j = head(Endpoint::chat, id, true);
  json c = json::object();
  c["index"] = 0;
  c["delta"] = json{{"role", "assistant"}, {"content", ""}};
  c["finish_reason"] = nullptr;
  j["choices"] = json::array({c});
  return j;
}

json stream_chunk(Endpoint e, const ResponseIdentity& id, const std::string& text, const std::string& finish_reason,
                  const Usage* usage) {
  json j = head(e, id, true);
  json c = json::object();
  c["index"] = 0;
  if (e == Endpoint::chat) {
    c["delta"] = finish_reason.empty() || !text.empty() ? json{{"content", text}} : json::object();
  } else {
    c["text"] = text;
    c["logprobs"] = nullptr;
  }
  c["finish_reason"] = finish(finish_reason);
  j["choices"] = json::array({c});
  if (usage) j["usage"] = usage_json(*usage);
  return j;
}

json usage_chunk(Endpoint e, const ResponseIdentity& id, const Usage& u) {
  json j = head(e, id, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  return j;
}

json error_body(const ApiError& e) {
  json err = json::object();
  err["message"] = e.what();
  err["type"] = e.type();
  err["param"] = e.param().empty() ? json() : json(e.param());
  err["code"] = e.status();
  return json{{"error", err}};
}

}  // namespace les::server
