// The evaluator: scopes, the interpreter state shared by statements, expressions and builtins,
// and the limits that keep an untrusted template bounded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "les/chat/jinja.h"
#include "les/chat/jinja_ast.h"
#include "les/chat/jinja_value.h"

namespace les::jinja {

// A scope. Lookups walk up the parents; assignments go to the scope itself. As in
// @huggingface/jinja, a for loop has one scope for all its iterations, `if` has none, and a
// macro's scope hangs off its caller's.
struct Env {
  explicit Env(EnvPtr p = nullptr) : parent(std::move(p)) {}
  const Value* find(const std::string& name) const;
  Value lookup(const std::string& name) const;  // undefined when absent
  void set(const std::string& name, Value v) { vars[name] = std::move(v); }

  EnvPtr parent;
  std::unordered_map<std::string, Value> vars;
};

// Thrown by {% break %} / {% continue %} up to the innermost loop being evaluated (through macro
// calls too, as in @huggingface/jinja).
struct BreakSignal {};
struct ContinueSignal {};

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, const std::optional<LocalTime>& now);
  ~Interpreter();  // empties every namespace created, which breaks any reference cycle
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string render(const Program& program, const nlohmann::ordered_json& vars);

  // Evaluates a statement or expression; a RuntimeError inside becomes a les::Error naming the
  // innermost node's position.
  Value eval(const Node& node, const EnvPtr& env);
  // The concatenated text of a block's statements (none and undefined print nothing).
  std::string eval_block(const NodeList& body, const EnvPtr& env);
  // Positional arguments (with *spread) and keyword arguments (with **spread).
  std::pair<std::vector<Value>, Dict> eval_args(const NodeList& args, const EnvPtr& env);
  Value call(const Value& fn, std::vector<Value>& args, const EnvPtr& env);

  // Values built under the limits.
  Value make_string(std::string s) const;
  Value make_array(Array a, Kind kind = Kind::Array) const;
  Value make_namespace(Dict d);
  void check_size(size_t bytes) const;
  // Counts bytes of new strings and arrays against RenderLimits::max_total_bytes.
  void charge(size_t bytes) const;
  const TextBudget& budget() const { return budget_; }
  const RenderLimits& limits() const { return limits_; }
  // The time strftime_now() formats: the one given to render(), else the current local time.
  LocalTime now() const;

 private:
  [[noreturn]] static void throw_at(const Node& node, const RuntimeError& e);
  Value eval_node(const Node& node, const EnvPtr& env);
  Value eval_member(const MemberNode& n, const EnvPtr& env);
  Value eval_slice(const Value& object, const SliceNode& n, const EnvPtr& env);
  Value eval_call(const CallNode& n, const EnvPtr& env);
  Value eval_unary(const UnaryNode& n, const EnvPtr& env);
  Value eval_binary(const BinaryNode& n, const EnvPtr& env);
  Value eval_test(const TestNode& n, const EnvPtr& env);
  Value eval_object(const ObjectNode& n, const EnvPtr& env);
  Value eval_set(const SetNode& n, const EnvPtr& env);
  Value eval_for(const ForNode& n, const EnvPtr& env);
  Value eval_macro(const MacroNode& n, const EnvPtr& env);
  Value eval_call_statement(const CallStatementNode& n, const EnvPtr& env);

  RenderLimits limits_;
  std::optional<LocalTime> now_;
  TextBudget budget_;
  int depth_ = 0;
  uint64_t steps_ = 0;
  mutable size_t charged_ = 0;
  std::vector<std::weak_ptr<Dict>> namespaces_;
};

// ---- macros (jinja_macro.cpp) ----

// Which of the special names `kwargs` / `varargs` a macro (or call block) body reads before
// declaring them; only then does the macro accept extra keyword / positional arguments.
struct SpecialArgs {
  bool kwargs = false, varargs = false;
};
SpecialArgs find_special_args(const NodeList& params, const NodeList& body);
// Binds a call's arguments to a macro's parameters in `scope` (defaults evaluated there, after
// every parameter is bound). `display_name` is "'name'" for a macro, "None" for a call block.
void bind_macro_args(Interpreter& in, const std::string& display_name, const NodeList& params,
                     const SpecialArgs& special, std::vector<Value> args, const EnvPtr& scope);

// ---- builtins (jinja_builtins.cpp) ----

// namespace, raise_exception, range, strftime_now, true/false/none and their title-case forms.
void install_globals(Env& global);
// The value of `object.name` for builtin properties and methods of strings, arrays and objects
// (after an object's own keys); nullopt when there is none.
std::optional<Value> builtin_member(const Interpreter& in, const Value& object, const std::string& name);
// `operand | filter` where filter is an Identifier or a Call node.
Value apply_filter(Interpreter& in, const Value& operand, const Node& filter, const EnvPtr& env);
// `operand is name`; `arg` is the extra value selectattr passes. nullopt for an unknown test.
std::optional<bool> run_test(const std::string& name, const Value& operand, const Value* arg);

}  // namespace les::jinja
