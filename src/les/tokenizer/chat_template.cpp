// Chat prompt formatting. Only ChatML (Qwen family) is built in; other templates are not
// interpreted (tokenizer.chat_template is kept in Vocab for callers that need it).
#include "les/tokenizer/tokenizer.h"

namespace les {

std::string apply_chatml(const std::vector<ChatMessage>& msgs, bool add_assistant_prompt) {
  std::string out;
  for (const ChatMessage& m : msgs) {
    out += "<|im_start|>";
    out += m.role;
    out += '\n';
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (add_assistant_prompt) out += "<|im_start|>assistant\n";
  return out;
}

bool template_is_chatml(std::string_view chat_template) {
  return chat_template.find("<|im_start|>") != std::string_view::npos &&
         chat_template.find("<|im_end|>") != std::string_view::npos;
}

}  // namespace les
