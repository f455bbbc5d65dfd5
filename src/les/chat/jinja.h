// A Jinja template engine for chat templates whose output is byte-identical to the npm package
// @huggingface/jinja (0.5.x), the reference that transformers.js and most JS front ends use.
// It follows that implementation, not Python Jinja2, wherever the two differ: JavaScript number
// formatting (1.0 prints "1.0", 1e21 prints "1e+21"), strings measured in UTF-16 units, `==`
// with JavaScript's loose equality, str.strip('x') ignoring its argument, a loop's `set`
// persisting across iterations, break/continue dropping the current iteration's output, macros
// seeing their caller's variables. The template is preprocessed with trim_blocks and
// lstrip_blocks on and a trailing newline dropped, as @huggingface/jinja's Template does.
// Known differences are listed in tests/data/templates/README.md.
//
// Untrusted templates are safe to parse and render: nesting, recursion, loop work, string and
// output sizes are bounded (RenderLimits), and every failure is a les::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace les::jinja {

struct Program;

// Bounds on one render; exceeding one throws les::Error naming the limit.
struct RenderLimits {
  size_t max_output_bytes = size_t(16) << 20;  // the rendered text and any one string value
  size_t max_array_size = size_t(1) << 20;     // elements of any one array (range(), +, ...)
  int max_depth = 256;                         // nesting of evaluation (macro recursion included)
  uint64_t max_steps = 10'000'000;             // evaluated nodes and loop iterations (~0.3 us each)
  size_t max_total_bytes = size_t(256) << 20;  // strings and arrays built over the whole render
                                               // (bounds memory: values can be kept in arrays)
};

// A local date and time for strftime_now() (which formats %Y %m %d %b %B %H %M %%). Renders
// given none read the clock (local time, as JavaScript's Date does).
struct LocalTime {
  int year = 1970;
  int month = 1;  // 1-12
  int day = 1;    // 1-31
  int hour = 0;   // 0-23
  int minute = 0;  // 0-59
};

// A parsed template. parse() throws les::Error naming line:column and what was expected.
class Template {
 public:
  static Template parse(std::string_view source);

  // Renders with the given variables (a JSON object; key order preserved: nlohmann::ordered_json).
  // Throws les::Error on a render error; raise_exception('msg') in the template throws
  // les::Error whose message contains msg. `now`: the time strftime_now() formats (a field out of
  // range throws les::Error); unset: the current local time.
  std::string render(const nlohmann::ordered_json& vars, const RenderLimits& limits = {},
                     const std::optional<LocalTime>& now = std::nullopt) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace les::jinja
