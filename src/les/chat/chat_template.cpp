#include "les/chat/chat_template.h"

#include "les/util/error.h"

namespace les {

using json = nlohmann::ordered_json;

const char* const ChatTemplate::kChatML =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

namespace {

// A text that JSON printing would escape (\u0001), so it shows up verbatim only when the template
// extracted it from the content list itself.
constexpr const char* kProbeText = "\x01les-content-probe";

}  // namespace

ChatTemplate::ChatTemplate(std::string source, ChatTemplateOptions opts)
    : fallback_(source.empty()),
      source_(fallback_ ? kChatML : std::move(source)),
      opts_(std::move(opts)),
      tmpl_(jinja::Template::parse(source_)) {
  const json probe = json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", kProbeText}}})}}});
  try {
    content_lists_ = render_raw(probe, false, json::object()).find(kProbeText) != std::string::npos;
  } catch (const Error&) {
    content_lists_ = false;
  }
}

json ChatTemplate::normalize(const json& messages) const {
  if (!messages.is_array()) throw Error("chat template: messages must be a JSON array");
  json out = json::array();
  for (const json& m : messages) {
    if (!m.is_object()) {
      out.push_back(m);
      continue;
    }
    json msg = m;
    if (!msg.contains("content") || msg["content"].is_null()) {
      msg["content"] = "";
    } else if (msg["content"].is_array() && !content_lists_) {
      std::string text;
      bool first = true;
      for (const json& part : msg["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) continue;
        if (!first) text += '\n';
        first = false;
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    }
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
      for (json& call : msg["tool_calls"]) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        json& fn = call["function"];
        if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
        json parsed = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
        if (parsed.is_object()) fn["arguments"] = std::move(parsed);
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::string ChatTemplate::render_raw(const json& messages, bool add_generation_prompt, const json& extra) const {
  json vars = json::object();
  vars["messages"] = messages;
  vars["add_generation_prompt"] = add_generation_prompt;
  vars["bos_token"] = opts_.bos_token;
  vars["eos_token"] = opts_.eos_token;
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  } else if (!extra.is_null()) {
    throw Error("chat template: extra variables must be a JSON object");
  }
  return tmpl_.render(vars, jinja::RenderLimits{}, opts_.now);
}

std::string ChatTemplate::render(const json& messages, bool add_generation_prompt, const json& extra) const {
  return render_raw(normalize(messages), add_generation_prompt, extra);
}

}  // namespace les
