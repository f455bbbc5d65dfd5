// The dynamic values of the Jinja evaluator, with @huggingface/jinja's runtime types: undefined,
// none, bool, integer and float (both JavaScript doubles), string, array, tuple, object (ordered),
// keyword arguments (an object passed as a call's last argument), namespace (a mutable object)
// and callable (builtins and macros). Arrays and objects are immutable and shared; namespaces are
// shared and mutable. Identity of arrays/objects matters, as it does for `==` in JavaScript.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace les::jinja {

class Interpreter;
struct Env;

// An error while evaluating, without a position yet: the evaluator turns it into a les::Error
// naming the innermost node being evaluated.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Value;
using Array = std::vector<Value>;
using EnvPtr = std::shared_ptr<Env>;

class Dict;

// A builtin function or a macro: arguments (keyword arguments, if any, as a trailing KwArgs value)
// and the caller's scope.
struct Callable {
  std::function<Value(Interpreter&, std::vector<Value>&, const EnvPtr&)> fn;
};

enum class Kind : uint8_t {
  Undefined, None, Bool, Int, Float, String, Array, Tuple, Object, KwArgs, Namespace, Function,
};

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  double num = 0;  // Int and Float
  std::variant<std::monostate, std::shared_ptr<const std::string>, std::shared_ptr<const Array>,
               std::shared_ptr<Dict>, std::shared_ptr<const Callable>>
      ref;

  static Value undefined() { return {}; }
  static Value none();
  static Value boolean(bool v);
  static Value integer(double v);
  static Value floating(double v);
  static Value string(std::string s);
  static Value array(Array a, Kind kind = Kind::Array);  // Array or Tuple
  static Value dict(Dict d, Kind kind = Kind::Object);   // Object, KwArgs or Namespace
  static Value function(Callable c);

  const std::string& str() const { return *std::get<1>(ref); }
  const Array& arr() const { return *std::get<2>(ref); }
  Dict& dict() const { return *std::get<3>(ref); }
  const Callable& fn() const { return *std::get<4>(ref); }
  // Identity of the shared payload (arrays, objects, namespaces, callables).
  const void* identity() const;

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float; }
  bool is_numeric_like() const { return is_number() || kind == Kind::Bool; }
  bool is_array() const { return kind == Kind::Array || kind == Kind::Tuple; }    // instanceof ArrayValue
  bool is_object() const { return kind == Kind::Object || kind == Kind::KwArgs; }  // instanceof ObjectValue
  bool is_attr_container() const { return is_object() || kind == Kind::Namespace; }
};

// An insertion-ordered string map (a JavaScript Map).
class Dict {
 public:
  const Value* find(std::string_view key) const;
  // Replaces the value of an existing key in place (keeping its position), else appends.
  void set(std::string key, Value v);
  bool erase(std::string_view key);
  void reserve(size_t n) { items_.reserve(n); }
  size_t size() const { return items_.size(); }
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

 private:
  void reindex();
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;  // kept once there are many keys
};

// @huggingface/jinja's type name ("StringValue", ...), as its error messages print them.
const char* type_name(Kind k);

// Bounds for turning values into text: cycles through namespaces and values that share structure
// (x = [x, x] repeated) must not recurse forever or grow without bound.
struct TextBudget {
  size_t max_bytes;
  int max_depth = 200;
};

// Jinja truthiness (__bool__): empty strings, arrays and objects are false, namespaces true.
bool truthy(const Value& v);
// JavaScript truthiness of the underlying value (`!!value`): every array/object is true.
bool raw_truthy(const Value& v);
// The text a value prints as ({{ v }}, toString()); arrays and objects as JSON with undefined
// printed as "undefined". Throws for tuples and keyword arguments, as @huggingface/jinja does.
std::string to_output(const Value& v, const TextBudget& budget);
// String(v.value): what `~` and string `+` use (1.0 -> "1", arrays joined by ",",
// objects "[object Map]").
std::string raw_to_string(const Value& v, const TextBudget& budget);
// Array.prototype.join's view of an element's underlying value (none and undefined are "").
std::string join_element(const Value& v, const TextBudget& budget);

// JavaScript `==` and `===` on the underlying values.
bool loose_equal(const Value& a, const Value& b, const TextBudget& budget);
bool strict_equal(const Value& a, const Value& b);

struct JsonOptions {
  int indent = 0;  // 0: one line; > 0: newlines and this many spaces per level
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool custom_separators = false;
  std::string item_separator, key_separator;
};
// The tojson filter (Python json.dumps layout). undefined_as_null false prints "undefined".
std::string to_json(const Value& v, const JsonOptions& opts, bool undefined_as_null, const TextBudget& budget);

// A JSON input variable, as JavaScript's JSON.parse + @huggingface/jinja see it: integral
// numbers are integers, object keys that are array indices come first in ascending order.
Value from_json(const nlohmann::ordered_json& j);

// Three-way comparison used by sort and dictsort (numbers and booleans together, strings with
// optional case folding, none with none, undefined with undefined); throws for other mixes.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

}  // namespace les::jinja
