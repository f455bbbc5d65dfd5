#include "les/chat/jinja.h"

#include "les/chat/jinja_ast.h"
#include "les/chat/jinja_interp.h"

namespace les::jinja {

Template Template::parse(std::string_view source) {
  return Template(std::shared_ptr<const Program>(parse_template(source)));
}

std::string Template::render(const nlohmann::ordered_json& vars, const RenderLimits& limits,
                             const std::optional<LocalTime>& now) const {
  Interpreter in(limits, now);
  return in.render(*program_, vars);
}

}  // namespace les::jinja
