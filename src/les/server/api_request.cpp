#include "les/server/api_request.h"

#include <array>

#include <cmath>

#include "les/util/error.h"

namespace les::server {

using json = nlohmann::ordered_json;

ApiError::ApiError(int status, std::string message, std::string param)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)) {}

const char* ApiError::type() const {
  switch (status_) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 503: return "server_busy_error";
    default: return status_ >= 500 ? "server_error" : "invalid_request_error";
  }
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, strfmt("'%s' %s", param.c_str(), what.c_str()), param);
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

// The field, or null when absent or JSON null (OpenAI clients send null for "not set").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& body, const char* name, bool def) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) bad(name, strfmt("must be a boolean, not %s", type_name(*v)));
  return v->get<bool>();
}

double get_number(const json& body, const char* name, double def, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number()) bad(name, strfmt("must be a number, not %s", type_name(*v)));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad(name, strfmt("must be in [%g, %g], not %g", lo, hi, x));
  return x;
}

int64_t get_int(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) bad(name, strfmt("must be an integer, not %g", d));
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
      bad(name, strfmt("must be in [%lld, %lld]", static_cast<long long>(lo), static_cast<long long>(hi)));
    }
    return static_cast<int64_t>(d);
  }
  if (!v->is_number_integer()) bad(name, strfmt("must be an integer, not %s", type_name(*v)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    bad(name, strfmt("must be in [%lld, %lld]", static_cast<long long>(lo), static_cast<long long>(hi)));
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, strfmt("must be in [%lld, %lld], not %lld", static_cast<long long>(lo),
                                          static_cast<long long>(hi), static_cast<long long>(x)));
  return x;
}

// A message's content: a string, null, or a list of {"type": "text", "text": ...} parts (joined
// with newlines) and {"type": "image_url", "image_url": {"url": "data:...;base64,..."}} parts (each
// a marker in the text, its bytes appended to images). Other part types are refused.
std::string content_text(const json& c, const std::string& param, std::vector<std::string>& images) {
  if (c.is_null()) return {};
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(param, strfmt("must be a string or an array of content parts, not %s", type_name(c)));
  std::string out;
  bool after_text = false;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string pp = strfmt("%s[%zu]", param.c_str(), i);
    if (!part.is_object()) bad(pp, "must be an object");
    const json* t = field(part, "type");
    if (!t || !t->is_string()) bad(pp + ".type", "must be a string");
    if (*t == "image_url") {
      const json* iu = field(part, "image_url");
      const json* url = iu && iu->is_object() ? field(*iu, "url") : iu;
      if (!url || !url->is_string()) bad(pp + ".image_url.url", "must be a string (a data: URL)");
      images.push_back(decode_data_url(url->get<std::string>(), pp + ".image_url.url"));
      out += "<__media__>";
      after_text = false;
      continue;
    }
    if (*t != "text") {
      bad(pp + ".type", strfmt("'%s' is not supported: content parts are text or image_url", t->get<std::string>().c_str()));
    }
    const json* text = field(part, "text");
    if (!text || !text->is_string()) bad(pp + ".text", "must be a string");
    if (after_text) out += '\n';
    out += text->get<std::string>();
    after_text = true;
  }
  return out;
}

}  // namespace

std::string decode_data_url(std::string_view url, const std::string& param) {
  if (!url.starts_with("data:")) {
    const size_t colon = url.find(':');
    const std::string scheme(url.substr(0, colon == std::string_view::npos ? 0 : colon));
    bad(param, scheme.empty() ? std::string("must be a data: URL with base64 image bytes")
                              : strfmt("'%s:' URLs are not fetched: send the image inline as a data: URL "
                                       "(data:image/png;base64,...)", scheme.c_str()));
  }
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) bad(param, "a data: URL needs a ',' before its data");
  const std::string_view meta = url.substr(5, comma - 5);
  if (!meta.ends_with(";base64")) bad(param, "the data: URL must be base64-encoded (data:image/...;base64,...)");
  const std::string_view b64 = url.substr(comma + 1);
  static const auto table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(a[i])] = static_cast<int8_t>(i);
    return t;
  }();
  std::string out;
  out.reserve(b64.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0, pad = 0;
  for (; i < b64.size(); ++i) {
    const char ch = b64[i];
    if (ch == '=') {
      ++pad;
      continue;
    }
    if (ch == '\n' || ch == '\r' || ch == ' ') continue;
    const int8_t v = table[static_cast<uint8_t>(ch)];
    if (v < 0 || pad > 0) bad(param, strfmt("the data: URL's base64 has an invalid character at offset %zu", i));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (pad > 2 || bits >= 6) bad(param, "the data: URL's base64 is truncated");
  if (out.empty()) bad(param, "the data: URL holds no bytes");
  return out;
}

namespace {

json parse_messages(const json& body, std::vector<std::string>& images) {
  const json* m = field(body, "messages");
  if (!m) bad("messages", "is required");
  if (!m->is_array()) bad("messages", strfmt("must be an array, not %s", type_name(*m)));
  if (m->empty()) bad("messages", "must not be empty");
  json out = json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string p = strfmt("messages[%zu]", i);
    if (!msg.is_object()) bad(p, strfmt("must be an object, not %s", type_name(msg)));
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) bad(p + ".role", "must be a string");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      bad(p + ".role", strfmt("'%s' is not one of system, developer, user, assistant, tool", r.c_str()));
    }
    json o = json::object();
    o["role"] = r == "developer" ? "system" : r;
    o["content"] = content_text(msg.contains("content") ? msg["content"] : json(), p + ".content", images);
    // Fields some templates read, passed through when well-formed.
    if (const json* rc = field(msg, "reasoning_content")) {
      if (!rc->is_string()) bad(p + ".reasoning_content", "must be a string");
      o["reasoning_content"] = *rc;
    }
    if (const json* tc = field(msg, "tool_calls")) {
      if (!tc->is_array()) bad(p + ".tool_calls", "must be an array");
      o["tool_calls"] = *tc;
    }
    for (const char* k : {"name", "tool_call_id"}) {
      if (const json* v = field(msg, k)) {
        if (!v->is_string()) bad(p + "." + k, "must be a string");
        o[k] = *v;
      }
    }
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<std::string> parse_stop(const json& body) {
  const json* s = field(body, "stop");
  if (!s) return {};
  if (s->is_string()) return {s->get<std::string>()};
  if (!s->is_array()) bad("stop", strfmt("must be a string or an array of strings, not %s", type_name(*s)));
  if (s->size() > 16) bad("stop", "has more than 16 strings");
  std::vector<std::string> out;
  for (const json& x : *s) {
    if (!x.is_string()) bad("stop", "must contain only strings");
    out.push_back(x.get<std::string>());
  }
  return out;
}

void parse_prompt(const json& body, CompletionRequest& r) {
  const json* p = field(body, "prompt");
  if (!p) bad("prompt", "is required");
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    return;
  }
  if (!p->is_array()) bad("prompt", strfmt("must be a string, an array of one string or an array of token ids, not %s", type_name(*p)));
  if (p->empty()) bad("prompt", "must not be empty");
  if ((*p)[0].is_string()) {
    if (p->size() != 1) bad("prompt", "holds several prompts: this server answers one prompt per request (n = 1)");
    r.prompt_text = (*p)[0].get<std::string>();
    return;
  }
  r.prompt_is_tokens = true;
  for (const json& t : *p) {
    if (!t.is_number_integer()) bad("prompt", "must contain only token ids (integers) or be a string");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id > INT32_MAX) bad("prompt", strfmt("token id %lld is out of range", static_cast<long long>(id)));
    r.prompt_tokens.push_back(static_cast<int32_t>(id));
  }
}

}  // namespace

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body_text) {
  json body;
  try {
    body = json::parse(body_text.begin(), body_text.end(), nullptr, true, false);
  } catch (const json::exception& e) {
    throw ApiError(400, strfmt("malformed JSON body: %s", e.what()));
  }
  if (!body.is_object()) throw ApiError(400, strfmt("the request body must be a JSON object, not %s", type_name(body)));

  CompletionRequest r;
  r.endpoint = endpoint;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad("model", strfmt("must be a string, not %s", type_name(*m)));
    r.model = m->get<std::string>();
  }
  r.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "must be an object");
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  if (endpoint == Endpoint::chat) {
    r.messages = parse_messages(body, r.images);
    if (const json* kw = field(body, "chat_template_kwargs")) {
      if (!kw->is_object()) bad("chat_template_kwargs", "must be an object");
      r.template_kwargs = *kw;
    }
    if (const json* tools = field(body, "tools")) {
      if (!tools->is_array()) bad("tools", "must be an array");
      r.template_kwargs["tools"] = *tools;
    }
  } else {
    parse_prompt(body, r);
    if (get_bool(body, "echo", false)) bad("echo", "is not supported");
    if (field(body, "suffix")) bad("suffix", "is not supported");
  }

  const int64_t n = get_int(body, "n", 1, 1, 128);
  if (n != 1) bad("n", "must be 1: this server generates one choice per request");
  if (const json* lp = field(body, "logprobs")) {
    if (!(lp->is_boolean() && !lp->get<bool>())) bad("logprobs", "is not supported");
  }
  if (field(body, "top_logprobs")) bad("top_logprobs", "is not supported");
  for (const char* k : {"presence_penalty", "frequency_penalty"}) {
    if (get_number(body, k, 0, -2, 2) != 0) bad(k, "is not supported (use repeat_penalty)");
  }

  int64_t max_tokens = -1;
  for (const char* k : {"max_completion_tokens", "max_tokens", "n_predict"}) {
    if (field(body, k)) {
      max_tokens = get_int(body, k, -1, k == std::string("n_predict") ? -1 : 0, INT32_MAX);
      break;
    }
  }
  r.max_tokens = static_cast<int>(max_tokens);

  SamplerParams& s = r.sampling;
  s.temp = static_cast<float>(get_number(body, "temperature", 0.8, 0, 100));
  s.top_p = static_cast<float>(get_number(body, "top_p", 0.95, 0, 1));
  if (s.top_p == 0) s.top_p = 1e-9f;  // keeps only the most likely token
  s.top_k = static_cast<int>(get_int(body, "top_k", 40, 0, INT32_MAX));
  s.min_p = static_cast<float>(get_number(body, "min_p", 0.05, 0, 1));
  s.repeat_penalty = static_cast<float>(get_number(body, "repeat_penalty", 1.0, 1e-3, 100));
  s.repeat_last_n = static_cast<int>(get_int(body, "repeat_last_n", 64, -1, INT32_MAX));
  if (field(body, "seed")) {
    s.seed = static_cast<uint64_t>(get_int(body, "seed", 0, INT64_MIN, INT64_MAX));
    r.seed_given = true;
  }
  r.stop = parse_stop(body);
  r.ignore_eos = get_bool(body, "ignore_eos", false);
  return r;
}

}  // namespace les::server
