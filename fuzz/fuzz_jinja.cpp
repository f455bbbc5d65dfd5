// Fuzz target: the Jinja engine (src/les/chat/jinja.h) on arbitrary bytes. The input is parsed as
// a template and, when it parses, rendered against a fixed small conversation (messages with a
// system prompt, reasoning, a tool call and its result; tools; add_generation_prompt;
// enable_thinking) under tight RenderLimits. Contract: parse and render either succeed or throw
// les::Error (any other exception escapes and is reported); they never crash, hang or run out of
// memory; the output respects max_output_bytes. Seeds: the chat templates of tests/data/templates.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "les/chat/jinja.h"
#include "les/util/error.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_jinja: postcondition failed: %s\n", what);
    std::abort();
  }
}

const nlohmann::ordered_json& variables() {
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in Zürich? \"quotes\" \\ {{ x }}"},
      {"role": "assistant", "content": "<think>\nlook it up\n</think>\n\n", "reasoning_content": "r",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"location": "Zürich", "days": [1, 2.5, null, true]}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21}"},
      {"role": "assistant", "content": [{"type": "text", "text": "Sunny 😀"}]},
      {"role": "user", "content": ""}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
               "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
  })");
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  les::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_array_size = 1 << 14;
  limits.max_steps = 200'000;
  try {
    const les::jinja::Template t = les::jinja::Template::parse(source);
    const std::string out = t.render(variables(), limits);
    require(out.size() <= limits.max_output_bytes, "output within max_output_bytes");
  } catch (const les::Error&) {
  }
  return 0;
}
