// Statement and expression evaluation, following @huggingface/jinja's Interpreter step by step
// (operand evaluation order, which operand types each operator accepts, error messages).
#include <cmath>
#include <ctime>

#include "les/chat/jinja_interp.h"
#include "les/chat/jinja_js.h"
#include "les/util/error.h"

namespace les::jinja {

const Value* Env::find(const std::string& name) const {
  for (const Env* e = this; e; e = e->parent.get()) {
    const auto it = e->vars.find(name);
    if (it != e->vars.end()) return &it->second;
  }
  return nullptr;
}

Value Env::lookup(const std::string& name) const {
  const Value* v = find(name);
  return v ? *v : Value::undefined();
}

Interpreter::Interpreter(const RenderLimits& limits, const std::optional<LocalTime>& now)
    : limits_(limits), now_(now), budget_{limits.max_output_bytes} {
  if (now_) {
    const LocalTime& t = *now_;
    if (t.month < 1 || t.month > 12 || t.day < 1 || t.day > 31 || t.hour < 0 || t.hour > 23 || t.minute < 0 || t.minute > 59 ||
        t.year < 0 || t.year > 9999) {
      throw Error(strfmt("jinja: render time out of range: %d-%d-%d %d:%d (year 0-9999, month 1-12, day 1-31, hour 0-23, minute 0-59)",
                         t.year, t.month, t.day, t.hour, t.minute));
    }
  }
}

LocalTime Interpreter::now() const {
  if (now_) return *now_;
  const std::time_t clock = std::time(nullptr);
  std::tm tm{};
  localtime_r(&clock, &tm);
  return LocalTime{tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min};
}

Interpreter::~Interpreter() {
  for (const auto& w : namespaces_) {
    if (auto d = w.lock()) *d = Dict();
  }
}

std::string Interpreter::render(const Program& program, const nlohmann::ordered_json& vars) {
  if (!vars.is_object() && !vars.is_null()) throw Error("jinja: template variables must be a JSON object");
  auto global = std::make_shared<Env>();
  install_globals(*global);
  if (vars.is_object()) {
    for (auto it = vars.begin(); it != vars.end(); ++it) {
      if (global->find(it.key())) throw Error("jinja: Variable already declared: " + it.key());
      global->set(it.key(), from_json(it.value()));
    }
  }
  try {
    return eval_block(program.body, global);
  } catch (const BreakSignal&) {
    throw Error("jinja: {% break %} outside of a loop");
  } catch (const ContinueSignal&) {
    throw Error("jinja: {% continue %} outside of a loop");
  } catch (const RuntimeError& e) {
    throw Error(std::string("jinja: render error: ") + e.what());
  }
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    throw RuntimeError(strfmt("string longer than %zu bytes (RenderLimits::max_output_bytes)", limits_.max_output_bytes));
  }
}

void Interpreter::charge(size_t bytes) const {
  charged_ += bytes;
  if (charged_ > limits_.max_total_bytes) {
    throw Error(strfmt("jinja: render built more than %zu bytes of strings and arrays (RenderLimits::max_total_bytes)",
                       limits_.max_total_bytes));
  }
}

Value Interpreter::make_string(std::string s) const {
  check_size(s.size());
  charge(s.size());
  return Value::string(std::move(s));
}

Value Interpreter::make_array(Array a, Kind kind) const {
  if (a.size() > limits_.max_array_size) {
    throw RuntimeError(strfmt("array longer than %zu elements (RenderLimits::max_array_size)", limits_.max_array_size));
  }
  charge(a.size() * sizeof(Value));
  return Value::array(std::move(a), kind);
}

Value Interpreter::make_namespace(Dict d) {
  Value v = Value::dict(std::move(d), Kind::Namespace);
  namespaces_.push_back(std::get<std::shared_ptr<Dict>>(v.ref));
  return v;
}

Value Interpreter::eval(const Node& node, const EnvPtr& env) {
  if (++steps_ > limits_.max_steps) {
    throw Error(strfmt("jinja: render took more than %llu steps (RenderLimits::max_steps)",
                       static_cast<unsigned long long>(limits_.max_steps)));
  }
  struct Depth {
    explicit Depth(int& d) : d_(d) { ++d_; }
    ~Depth() { --d_; }
    int& d_;
  } depth(depth_);
  try {
    if (depth_ > limits_.max_depth) {
      throw RuntimeError(strfmt("evaluation nested deeper than %d levels (recursion?)", limits_.max_depth));
    }
    return eval_node(node, env);
  } catch (const RuntimeError& e) {
    throw_at(node, e);
  }
}

void Interpreter::throw_at(const Node& node, const RuntimeError& e) {
  throw Error(strfmt("jinja: render error at line %u, column %u: %s", node.line, node.col, e.what()));
}

std::string Interpreter::eval_block(const NodeList& body, const EnvPtr& env) {
  std::string out;
  for (const NodePtr& stmt : body) {
    const Value v = eval(*stmt, env);
    if (v.is_undefined() || v.is_none()) continue;
    try {
      const size_t before = out.size();
      if (v.is_string()) {
        out += v.str();
      } else {
        out += to_output(v, budget_);
      }
      check_size(out.size());
      charge(out.size() - before);
    } catch (const RuntimeError& e) {
      throw_at(*stmt, e);
    }
  }
  return out;
}

std::pair<std::vector<Value>, Dict> Interpreter::eval_args(const NodeList& args, const EnvPtr& env) {
  std::vector<Value> positional;
  Dict keywords;
  // As in Python, all positional arguments (a *spread after keywords included) are evaluated
  // before any keyword argument.
  for (const NodePtr& a : args) {
    if (a->kind == NodeKind::Spread) {
      const Value v = eval(*a->as<SpreadNode>().value, env);
      if (!v.is_array()) throw RuntimeError(std::string("Cannot unpack non-iterable type: ") + type_name(v.kind));
      positional.insert(positional.end(), v.arr().begin(), v.arr().end());
    } else if (a->kind != NodeKind::KeywordArgument && a->kind != NodeKind::KeywordSpread) {
      positional.push_back(eval(*a, env));
    }
  }
  const auto add = [&](const std::string& key, Value v) {
    if (keywords.find(key)) throw RuntimeError("Got multiple values for keyword argument '" + key + "'");
    keywords.set(key, std::move(v));
  };
  for (const NodePtr& a : args) {
    if (a->kind == NodeKind::KeywordArgument) {
      const auto& kw = a->as<KeywordArgumentNode>();
      add(kw.key, eval(*kw.value, env));
    } else if (a->kind == NodeKind::KeywordSpread) {
      const Value v = eval(*a->as<SpreadNode>().value, env);
      if (!v.is_object()) {
        throw RuntimeError(std::string("Argument after ** must be a mapping, not ") + type_name(v.kind));
      }
      for (const auto& [k, val] : v.dict().items()) add(k, val);
    }
  }
  return {std::move(positional), std::move(keywords)};
}

Value Interpreter::call(const Value& fn, std::vector<Value>& args, const EnvPtr& env) {
  if (fn.kind != Kind::Function) {
    throw RuntimeError(std::string("Cannot call something that is not a function: got ") + type_name(fn.kind));
  }
  return fn.fn().fn(*this, args, env);
}

Value Interpreter::eval_node(const Node& node, const EnvPtr& env) {
  switch (node.kind) {
    case NodeKind::StringLiteral: return Value::string(node.as<StringNode>().value);
    case NodeKind::IntegerLiteral: return Value::integer(node.as<NumberNode>().value);
    case NodeKind::FloatLiteral: return Value::floating(node.as<NumberNode>().value);
    case NodeKind::ArrayLiteral:
    case NodeKind::TupleLiteral: {
      Array items;
      for (const NodePtr& e : node.as<ListNode>().items) items.push_back(eval(*e, env));
      return make_array(std::move(items), node.kind == NodeKind::ArrayLiteral ? Kind::Array : Kind::Tuple);
    }
    case NodeKind::ObjectLiteral: return eval_object(node.as<ObjectNode>(), env);
    case NodeKind::Identifier: return env->lookup(node.as<IdentifierNode>().name);
    case NodeKind::Member: return eval_member(node.as<MemberNode>(), env);
    case NodeKind::Call: return eval_call(node.as<CallNode>(), env);
    case NodeKind::Unary: return eval_unary(node.as<UnaryNode>(), env);
    case NodeKind::Binary: return eval_binary(node.as<BinaryNode>(), env);
    case NodeKind::Filter: {
      const auto& f = node.as<FilterNode>();
      const Value operand = eval(*f.operand, env);
      return apply_filter(*this, operand, *f.filter, env);
    }
    case NodeKind::Test: return eval_test(node.as<TestNode>(), env);
    case NodeKind::Select: {
      const auto& s = node.as<SelectNode>();
      if (!truthy(eval(*s.test, env))) return Value::undefined();
      return eval(*s.value, env);
    }
    case NodeKind::Ternary: {
      const auto& t = node.as<TernaryNode>();
      return truthy(eval(*t.test, env)) ? eval(*t.if_true, env) : eval(*t.if_false, env);
    }
    case NodeKind::Comment: return Value::none();
    case NodeKind::If: {
      const auto& n = node.as<IfNode>();
      const bool test = truthy(eval(*n.test, env));
      return Value::string(eval_block(test ? n.body : n.alternate, env));
    }
    case NodeKind::For: return eval_for(node.as<ForNode>(), env);
    case NodeKind::Set: return eval_set(node.as<SetNode>(), env);
    case NodeKind::Macro: return eval_macro(node.as<MacroNode>(), env);
    case NodeKind::CallStatement: return eval_call_statement(node.as<CallStatementNode>(), env);
    case NodeKind::FilterStatement: {
      const auto& n = node.as<FilterStatementNode>();
      const Value rendered = Value::string(eval_block(n.body, env));
      return apply_filter(*this, rendered, *n.filter, env);
    }
    case NodeKind::Break: throw BreakSignal{};
    case NodeKind::Continue: throw ContinueSignal{};
    case NodeKind::Slice:
    case NodeKind::KeywordArgument:
    case NodeKind::Spread:
    case NodeKind::KeywordSpread: break;
  }
  throw RuntimeError(std::string("Unknown node type: ") + node_name(node.kind));
}

Value Interpreter::eval_object(const ObjectNode& n, const EnvPtr& env) {
  Dict d;
  for (const auto& [key_node, value_node] : n.entries) {
    const Value key = eval(*key_node, env);
    if (!key.is_string()) throw RuntimeError(std::string("Object keys must be strings: got ") + type_name(key.kind));
    d.set(key.str(), eval(*value_node, env));
  }
  return Value::dict(std::move(d));
}

Value Interpreter::eval_member(const MemberNode& n, const EnvPtr& env) {
  const Value object = eval(*n.object, env);
  Value property;
  if (n.computed) {
    if (n.property->kind == NodeKind::Slice) return eval_slice(object, n.property->as<SliceNode>(), env);
    property = eval(*n.property, env);
  } else if (n.property->kind == NodeKind::IntegerLiteral) {
    property = Value::integer(n.property->as<NumberNode>().value);
  } else {
    property = Value::string(n.property->as<IdentifierNode>().name);
  }

  if (object.is_attr_container()) {
    if (!property.is_string()) {
      throw RuntimeError(std::string("Cannot access property with non-string: got ") + type_name(property.kind));
    }
    if (const Value* v = object.dict().find(property.str())) return *v;
    if (object.is_object()) return builtin_member(*this, object, property.str()).value_or(Value::undefined());
    return Value::undefined();
  }
  if (object.is_array() || object.is_string()) {
    if (property.kind == Kind::Int) {
      if (object.is_string()) {
        const auto c = js::utf16_at(object.str(), property.num);
        return c ? Value::string(*c) : Value::undefined();
      }
      const Array& a = object.arr();
      double k = std::trunc(property.num);
      if (k < 0) k += static_cast<double>(a.size());
      if (k < 0 || k >= static_cast<double>(a.size())) return Value::undefined();
      return a[static_cast<size_t>(k)];
    }
    if (property.is_string()) return builtin_member(*this, object, property.str()).value_or(Value::undefined());
    throw RuntimeError(std::string("Cannot access property with non-string/non-number: got ") + type_name(property.kind));
  }
  if (!property.is_string()) {
    throw RuntimeError(std::string("Cannot access property with non-string: got ") + type_name(property.kind));
  }
  return builtin_member(*this, object, property.str()).value_or(Value::undefined());
}

Value Interpreter::eval_slice(const Value& object, const SliceNode& n, const EnvPtr& env) {
  if (!object.is_array() && !object.is_string()) throw RuntimeError("Slice object must be an array or string");
  const auto part = [&](const NodePtr& p, const char* what) -> std::optional<double> {
    const Value v = p ? eval(*p, env) : Value::undefined();
    if (v.is_undefined()) return std::nullopt;
    if (v.kind != Kind::Int) throw RuntimeError(strfmt("Slice %s must be numeric or undefined", what));
    return v.num;
  };
  const std::optional<double> start_v = part(n.start, "start"), stop_v = part(n.stop, "stop"), step_v = part(n.step, "step");

  std::vector<std::string_view> chars;
  if (object.is_string()) chars = js::code_points(object.str());
  const double len = static_cast<double>(object.is_string() ? chars.size() : object.arr().size());
  const double step = step_v.value_or(1);
  const double direction = step > 0 ? 1 : step < 0 ? -1 : 0;
  double start, stop;
  if (direction >= 0) {
    start = start_v.value_or(0);
    start = start < 0 ? std::max(len + start, 0.0) : std::min(start, len);
    stop = stop_v.value_or(len);
    stop = stop < 0 ? std::max(len + stop, 0.0) : std::min(stop, len);
  } else {
    start = start_v.value_or(len - 1);
    start = start < 0 ? std::max(len + start, -1.0) : std::min(start, len - 1);
    stop = stop_v.value_or(-1);
    stop = stop < -1 ? std::max(len + stop, -1.0) : std::min(stop, len - 1);
  }
  Array items;
  std::string text;
  for (double i = start; direction * i < direction * stop; i += step) {
    const size_t k = static_cast<size_t>(i);
    if (object.is_string()) {
      text += chars[k];
    } else {
      items.push_back(object.arr()[k]);
    }
  }
  if (object.is_string()) return make_string(std::move(text));
  return make_array(std::move(items));
}

Value Interpreter::eval_call(const CallNode& n, const EnvPtr& env) {
  auto [args, keywords] = eval_args(n.args, env);
  if (keywords.size() > 0) args.push_back(Value::dict(std::move(keywords), Kind::KwArgs));
  const Value fn = eval(*n.callee, env);
  if (fn.kind == Kind::Undefined && n.callee->kind == NodeKind::Member) {
    // x.append(...) and the like: Python methods that modify a list or dict in place. Neither
    // @huggingface/jinja nor transformers (ImmutableSandboxedEnvironment) has them, so neither
    // renders such a template; say why, after @huggingface/jinja's own message.
    const auto& member = n.callee->as<MemberNode>();
    if (!member.computed && member.property->kind == NodeKind::Identifier) {
      static const char* const kMutators[] = {"append", "extend", "insert", "pop", "remove", "clear",
                                              "sort", "reverse", "update", "setdefault", "popitem"};
      const std::string& name = member.property->as<IdentifierNode>().name;
      for (const char* m : kMutators) {
        if (name == m) {
          throw RuntimeError("Cannot call something that is not a function: got UndefinedValue (." + name +
                             "() modifies a list or dict in place: templates cannot do that here, as with "
                             "@huggingface/jinja and transformers' ImmutableSandboxedEnvironment)");
        }
      }
    }
  }
  return call(fn, args, env);
}

Value Interpreter::eval_unary(const UnaryNode& n, const EnvPtr& env) {
  const Value v = eval(*n.operand, env);
  if (n.op == "not") return Value::boolean(!truthy(v));
  if (v.is_numeric_like()) {
    const double x = v.kind == Kind::Bool ? (v.b ? 1 : 0) : v.num;
    const double r = (n.op == "-" ? -1.0 : 1.0) * x;
    return v.kind == Kind::Float ? Value::floating(r) : Value::integer(r);
  }
  throw RuntimeError("Unknown operator \"" + n.op + "\" for " + type_name(v.kind));
}

Value Interpreter::eval_binary(const BinaryNode& n, const EnvPtr& env) {
  const std::string& op = n.op;
  const Value left = eval(*n.left, env);
  if (op == "and") return truthy(left) ? eval(*n.right, env) : left;
  if (op == "or") return truthy(left) ? left : eval(*n.right, env);
  const Value right = eval(*n.right, env);
  if (op == "==") return Value::boolean(loose_equal(left, right, budget_));
  if (op == "!=") return Value::boolean(!loose_equal(left, right, budget_));

  const bool membership = op == "in" || op == "not in";
  if (left.is_undefined() || right.is_undefined()) {
    // `x in undefined` is false and `x not in undefined` true.
    if (right.is_undefined() && membership) return Value::boolean(op == "not in");
    throw RuntimeError("Cannot perform operation " + op + " on undefined values");
  }
  if (left.is_none() || right.is_none()) throw RuntimeError("Cannot perform operation on null values");

  if (op == "~") {
    std::string s = raw_to_string(left, budget_);
    s += raw_to_string(right, budget_);
    return make_string(std::move(s));
  }
  if (op == "**" && left.is_numeric_like() && right.is_numeric_like()) {
    const double a = left.kind == Kind::Bool ? (left.b ? 1 : 0) : left.num;
    const double b = right.kind == Kind::Bool ? (right.b ? 1 : 0) : right.num;
    if (a == 0 && b < 0) throw RuntimeError("0.0 cannot be raised to a negative power");
    const double r = std::pow(a, b);
    if (!std::isfinite(r)) throw RuntimeError("Exponentiation result is not a finite real number");
    const bool is_float = left.kind == Kind::Float || right.kind == Kind::Float || b < 0;
    return is_float ? Value::floating(r) : Value::integer(r);
  }
  if (left.is_number() && right.is_number()) {
    const double a = left.num, b = right.num;
    const bool is_float = left.kind == Kind::Float || right.kind == Kind::Float;
    const auto num = [&](double r) { return is_float ? Value::floating(r) : Value::integer(r); };
    if (op == "+") return num(a + b);
    if (op == "-") return num(a - b);
    if (op == "*") return num(a * b);
    if (op == "/") return Value::floating(a / b);
    if (op == "//") return num(std::floor(a / b));
    if (op == "%") return num(std::fmod(a, b));
    if (op == "<") return Value::boolean(a < b);
    if (op == ">") return Value::boolean(a > b);
    if (op == ">=") return Value::boolean(a >= b);
    if (op == "<=") return Value::boolean(a <= b);
  } else if (left.is_array() && right.is_array()) {
    if (op == "+") {
      Array joined = left.arr();
      joined.insert(joined.end(), right.arr().begin(), right.arr().end());
      return make_array(std::move(joined));
    }
  } else if (right.is_array() && membership) {
    bool found = false;
    for (const Value& x : right.arr()) {
      if (strict_equal(x, left)) {
        found = true;
        break;
      }
    }
    return Value::boolean(found == (op == "in"));
  }
  if ((left.is_string() || right.is_string()) && op == "+") {
    std::string s = raw_to_string(left, budget_);
    s += raw_to_string(right, budget_);
    return make_string(std::move(s));
  }
  if (left.is_string() && right.is_string() && membership) {
    return Value::boolean((right.str().find(left.str()) != std::string::npos) == (op == "in"));
  }
  if (left.is_string() && right.is_object() && membership) {
    return Value::boolean((right.dict().find(left.str()) != nullptr) == (op == "in"));
  }
  throw RuntimeError("Unknown operator \"" + op + "\" between " + type_name(left.kind) + " and " + type_name(right.kind));
}

Value Interpreter::eval_test(const TestNode& n, const EnvPtr& env) {
  const Value operand = eval(*n.operand, env);
  const std::optional<bool> r = run_test(n.test, operand, nullptr);
  if (!r) throw RuntimeError("Unknown test: " + n.test);
  return Value::boolean(*r != n.negate);
}

Value Interpreter::eval_set(const SetNode& n, const EnvPtr& env) {
  const Value rhs = n.value ? eval(*n.value, env) : Value::string(eval_block(n.body, env));
  const Node& target = *n.target;
  if (target.kind == NodeKind::Identifier) {
    env->set(target.as<IdentifierNode>().name, rhs);
  } else if (target.kind == NodeKind::TupleLiteral) {
    const NodeList& names = target.as<ListNode>().items;
    if (!rhs.is_array()) throw RuntimeError(std::string("Cannot unpack non-iterable type in set: ") + type_name(rhs.kind));
    const Array& values = rhs.arr();
    if (values.size() != names.size()) {
      throw RuntimeError(strfmt("Too %s items to unpack in set", names.size() > values.size() ? "few" : "many"));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i]->kind != NodeKind::Identifier) {
        throw RuntimeError(std::string("Cannot unpack to non-identifier in set: ") + node_name(names[i]->kind));
      }
      env->set(names[i]->as<IdentifierNode>().name, values[i]);
    }
  } else if (target.kind == NodeKind::Member) {
    const auto& m = target.as<MemberNode>();
    const Value object = eval(*m.object, env);
    if (object.kind != Kind::Namespace) throw RuntimeError("cannot assign attribute on non-namespace object");
    if (m.property->kind != NodeKind::Identifier) throw RuntimeError("Cannot assign to member with non-identifier property");
    object.dict().set(m.property->as<IdentifierNode>().name, rhs);
  } else {
    throw RuntimeError(std::string("Invalid LHS inside assignment expression: ") + node_name(target.kind));
  }
  return Value::none();
}

namespace {

// Assigns a loop item to the loop variable(s) in `scope`.
void bind_loopvar(const Node& loopvar, const Value& item, Env& scope) {
  if (loopvar.kind == NodeKind::Identifier) {
    scope.set(loopvar.as<IdentifierNode>().name, item);
    return;
  }
  const NodeList& names = loopvar.as<ListNode>().items;
  for (size_t j = 0; j < names.size(); ++j) {
    if (names[j]->kind != NodeKind::Identifier) {
      throw RuntimeError(std::string("Cannot unpack non-identifier type: ") + node_name(names[j]->kind));
    }
    scope.set(names[j]->as<IdentifierNode>().name, item.arr()[j]);
  }
}

}  // namespace

Value Interpreter::eval_for(const ForNode& n, const EnvPtr& env) {
  auto scope = std::make_shared<Env>(env);
  const Node* test = nullptr;
  Value iterable;
  if (n.iterable->kind == NodeKind::Select) {
    const auto& s = n.iterable->as<SelectNode>();
    iterable = eval(*s.value, scope);
    test = s.test.get();
  } else {
    iterable = eval(*n.iterable, scope);
  }
  if (!iterable.is_array() && !iterable.is_object()) {
    throw RuntimeError(std::string("Expected iterable or object type in for loop: got ") + type_name(iterable.kind));
  }
  Array all;
  if (iterable.is_object()) {
    for (const auto& kv : iterable.dict().items()) all.push_back(Value::string(kv.first));
  } else {
    all = iterable.arr();
  }

  Array items;
  for (const Value& item : all) {
    if (n.loopvar->kind == NodeKind::TupleLiteral) {
      const size_t want = n.loopvar->as<ListNode>().items.size();
      if (item.kind != Kind::Array) throw RuntimeError(std::string("Cannot unpack non-iterable type: ") + type_name(item.kind));
      if (item.arr().size() != want) {
        throw RuntimeError(strfmt("Too %s items to unpack", want > item.arr().size() ? "few" : "many"));
      }
    }
    if (test) {
      auto loop_scope = std::make_shared<Env>(scope);
      bind_loopvar(*n.loopvar, item, *loop_scope);
      if (!truthy(eval(*test, loop_scope))) continue;
    }
    items.push_back(item);
  }

  std::string out;
  bool no_iteration = true;
  const double count = static_cast<double>(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (++steps_ > limits_.max_steps) {
      throw Error(strfmt("jinja: render took more than %llu steps (RenderLimits::max_steps)",
                         static_cast<unsigned long long>(limits_.max_steps)));
    }
    const double k = static_cast<double>(i);
    Dict loop;
    loop.reserve(9);
    loop.set("index", Value::integer(k + 1));
    loop.set("index0", Value::integer(k));
    loop.set("revindex", Value::integer(count - k));
    loop.set("revindex0", Value::integer(count - k - 1));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i + 1 == items.size()));
    loop.set("length", Value::integer(count));
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined());
    loop.set("nextitem", i + 1 < items.size() ? items[i + 1] : Value::undefined());
    scope->set("loop", Value::dict(std::move(loop)));
    bind_loopvar(*n.loopvar, items[i], *scope);
    // A break or continue drops the output of the iteration it interrupts.
    try {
      out += eval_block(n.body, scope);
    } catch (const ContinueSignal&) {
      continue;
    } catch (const BreakSignal&) {
      break;
    }
    check_size(out.size());
    no_iteration = false;
  }
  if (no_iteration) out += eval_block(n.else_body, scope);
  check_size(out.size());
  charge(items.size() * sizeof(Value));
  return Value::string(std::move(out));
}

Value Interpreter::eval_macro(const MacroNode& n, const EnvPtr& env) {
  const SpecialArgs special = find_special_args(n.params, n.body);
  const MacroNode* node = &n;
  env->set(n.name, Value::function({[node, special](Interpreter& in, std::vector<Value>& args, const EnvPtr& caller) {
             auto scope = std::make_shared<Env>(caller);
             bind_macro_args(in, "'" + node->name + "'", node->params, special, std::move(args), scope);
             return Value::string(in.eval_block(node->body, scope));
           }}));
  return Value::none();
}

Value Interpreter::eval_call_statement(const CallStatementNode& n, const EnvPtr& env) {
  const SpecialArgs special = find_special_args(n.caller_params, n.body);
  const CallStatementNode* node = &n;
  Value caller = Value::function({[node, special, env](Interpreter& in, std::vector<Value>& args, const EnvPtr&) {
    auto scope = std::make_shared<Env>(env);
    bind_macro_args(in, "None", node->caller_params, special, std::move(args), scope);
    return Value::string(in.eval_block(node->body, scope));
  }});
  const auto& call_node = n.call->as<CallNode>();
  auto [args, keywords] = eval_args(call_node.args, env);
  args.push_back(Value::dict(std::move(keywords), Kind::KwArgs));
  const Value fn = eval(*call_node.callee, env);
  if (fn.kind != Kind::Function) {
    throw RuntimeError(std::string("Cannot call something that is not a function: got ") + type_name(fn.kind));
  }
  auto call_env = std::make_shared<Env>(env);
  call_env->set("caller", std::move(caller));
  return call(fn, args, call_env);
}

}  // namespace les::jinja
