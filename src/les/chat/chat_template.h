// Chat prompts from OpenAI-style messages through a model's Jinja chat template
// (tokenizer.chat_template), rendered by les::jinja exactly as @huggingface/jinja renders it.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "les/chat/jinja.h"

namespace les {

struct ChatTemplateOptions {
  std::string bos_token, eos_token;  // the texts of the model's BOS / EOS tokens
  std::optional<jinja::LocalTime> now;  // what strftime_now() formats; unset: the current local time
};

class ChatTemplate {
 public:
  // source empty -> ChatML fallback ("<|im_start|>role\ncontent<|im_end|>\n" per message, then
  // "<|im_start|>assistant\n" with add_generation_prompt). Parse errors throw les::Error.
  ChatTemplate(std::string source, ChatTemplateOptions opts);

  // messages: a JSON array of {"role": ..., "content": string | [{"type": "text", "text": ...}, ...],
  // optional "reasoning_content", "tool_calls", "name", ...} as an OpenAI request gives them.
  // Before rendering, each message is normalised the way the templates expect:
  //   - a missing or null content becomes "";
  //   - a content list becomes its text parts joined with "\n", unless the template itself
  //     renders content lists (found once, by a probe render);
  //   - a tool call's function.arguments given as a JSON string holding an object becomes that
  //     object (templates print it with tojson or iterate its items).
  // extra: additional template variables (e.g. {"enable_thinking": false}, "tools"). Variables
  // given to the template: messages, add_generation_prompt, bos_token, eos_token, plus extra
  // (which may override them). Throws les::Error on a render error (a template's
  // raise_exception included).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  bool is_fallback() const { return fallback_; }
  // True when the template renders content given as a list of parts.
  bool renders_content_lists() const { return content_lists_; }
  const std::string& source() const { return source_; }

  // The ChatML template used when a model has none.
  static const char* const kChatML;

 private:
  nlohmann::ordered_json normalize(const nlohmann::ordered_json& messages) const;
  std::string render_raw(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                         const nlohmann::ordered_json& extra) const;

  bool fallback_;  // (first: initialised before source is moved into source_)
  std::string source_;
  ChatTemplateOptions opts_;
  jinja::Template tmpl_;
  bool content_lists_ = false;
};

}  // namespace les
