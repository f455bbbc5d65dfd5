#include "les/chat/jinja_value.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "les/chat/jinja_js.h"
#include "les/util/error.h"

namespace les::jinja {

// ---- Dict ----

namespace {
constexpr size_t kIndexFrom = 12;  // below this many keys a linear scan is faster
}

const Value* Dict::find(std::string_view key) const {
  if (!index_.empty()) {
    const auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value v) {
  if (const Value* existing = find(key)) {
    *const_cast<Value*>(existing) = std::move(v);
    return;
  }
  items_.emplace_back(std::move(key), std::move(v));
  if (!index_.empty()) {
    index_.emplace(items_.back().first, items_.size() - 1);
  } else if (items_.size() >= kIndexFrom) {
    reindex();
  }
}

bool Dict::erase(std::string_view key) {
  const auto it = std::find_if(items_.begin(), items_.end(), [&](const auto& kv) { return kv.first == key; });
  if (it == items_.end()) return false;
  items_.erase(it);
  index_.clear();
  if (items_.size() >= kIndexFrom) reindex();
  return true;
}

void Dict::reindex() {
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
}

// ---- Value ----

Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.b = b;
  return v;
}
Value Value::integer(double d) {
  Value v;
  v.kind = Kind::Int;
  v.num = d;
  return v;
}
Value Value::floating(double d) {
  Value v;
  v.kind = Kind::Float;
  v.num = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind = Kind::String;
  v.ref = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::array(Array a, Kind kind) {
  Value v;
  v.kind = kind;
  v.ref = std::make_shared<const Array>(std::move(a));
  return v;
}
Value Value::dict(Dict d, Kind kind) {
  Value v;
  v.kind = kind;
  v.ref = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::function(Callable c) {
  Value v;
  v.kind = Kind::Function;
  v.ref = std::make_shared<const Callable>(std::move(c));
  return v;
}

const void* Value::identity() const {
  return std::visit(
      [](const auto& p) -> const void* {
        if constexpr (std::is_same_v<std::decay_t<decltype(p)>, std::monostate>) {
          return nullptr;
        } else {
          return p.get();
        }
      },
      ref);
}

const char* type_name(Kind k) {
  switch (k) {
    case Kind::Undefined: return "UndefinedValue";
    case Kind::None: return "NullValue";
    case Kind::Bool: return "BooleanValue";
    case Kind::Int: return "IntegerValue";
    case Kind::Float: return "FloatValue";
    case Kind::String: return "StringValue";
    case Kind::Array: return "ArrayValue";
    case Kind::Tuple: return "TupleValue";
    case Kind::Object: return "ObjectValue";
    case Kind::KwArgs: return "KeywordArgumentsValue";
    case Kind::Namespace: return "NamespaceValue";
    case Kind::Function: return "FunctionValue";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: case Kind::Float: return v.num != 0 && !std::isnan(v.num);
    case Kind::String: return !v.str().empty();
    case Kind::Array: case Kind::Tuple: return !v.arr().empty();
    case Kind::Object: case Kind::KwArgs: return v.dict().size() > 0;
    case Kind::Namespace: case Kind::Function: return true;
  }
  return false;
}

bool raw_truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Array: case Kind::Tuple: case Kind::Object: case Kind::KwArgs: return true;
    default: return truthy(v);
  }
}

namespace {

// Appends to a string under a TextBudget.
struct Writer {
  std::string& out;
  const TextBudget& budget;
  void add(std::string_view s) {
    if (out.size() + s.size() > budget.max_bytes) {
      throw RuntimeError(strfmt("string longer than %zu bytes", budget.max_bytes));
    }
    out += s;
  }
  void enter(int depth) const {
    if (depth > budget.max_depth) {
      throw RuntimeError(strfmt("value nested deeper than %d levels (a cycle?)", budget.max_depth));
    }
  }
};

void write_output(Writer& w, const Value& v, int depth);
void write_json(Writer& w, const Value& v, const JsonOptions& o, bool undefined_as_null, int depth);

void write_raw(Writer& w, const Value& v, int depth) {
  w.enter(depth);
  switch (v.kind) {
    case Kind::Undefined: w.add("undefined"); return;
    case Kind::None: w.add("null"); return;
    case Kind::Bool: w.add(v.b ? "true" : "false"); return;
    case Kind::Int: case Kind::Float: w.add(js::number_to_string(v.num)); return;
    case Kind::String: w.add(v.str()); return;
    case Kind::Array: case Kind::Tuple: {
      bool first = true;
      for (const Value& e : v.arr()) {
        if (!first) w.add(",");
        first = false;
        write_output(w, e, depth + 1);
      }
      return;
    }
    case Kind::Object: case Kind::KwArgs: case Kind::Namespace: w.add("[object Map]"); return;
    case Kind::Function: w.add("function"); return;
  }
}

void write_output(Writer& w, const Value& v, int depth) {
  w.enter(depth);
  switch (v.kind) {
    case Kind::Float: w.add(js::float_to_string(v.num)); return;
    case Kind::Array: case Kind::Tuple: case Kind::Object: case Kind::KwArgs: case Kind::Namespace:
      write_json(w, v, JsonOptions{}, false, depth);
      return;
    default: write_raw(w, v, depth); return;
  }
}

// Ordering of String.prototype.localeCompare for sort_keys, approximated: letters compare
// case-insensitively after punctuation and digits, lowercase first on ties.
bool locale_less(const std::string& a, const std::string& b) {
  const auto cls = [](uint32_t c) { return (c < 0x80 && std::isalpha(static_cast<int>(c))) ? 2 : (c >= '0' && c <= '9') ? 1 : (c < 0x80 ? 0 : 3); };
  const std::vector<std::string_view> ca = js::code_points(a), cb = js::code_points(b);
  for (size_t i = 0; i < ca.size() && i < cb.size(); ++i) {
    const uint32_t x = js::decode_at(ca[i], 0).cp, y = js::decode_at(cb[i], 0).cp;
    const uint32_t lx = x < 0x80 ? static_cast<uint32_t>(std::tolower(static_cast<int>(x))) : x;
    const uint32_t ly = y < 0x80 ? static_cast<uint32_t>(std::tolower(static_cast<int>(y))) : y;
    if (cls(x) != cls(y)) return cls(x) < cls(y);
    if (lx != ly) return lx < ly;
  }
  if (ca.size() != cb.size()) return ca.size() < cb.size();
  return b < a;  // lowercase (greater code) first
}

void write_json(Writer& w, const Value& v, const JsonOptions& o, bool undefined_as_null, int depth) {
  w.enter(depth);
  std::string item_sep = ", ", key_sep = ": ";
  if (o.custom_separators) {
    item_sep = o.item_separator, key_sep = o.key_separator;
  } else if (o.indent != 0) {
    item_sep = ",";
  }
  switch (v.kind) {
    case Kind::None: w.add("null"); return;
    case Kind::Undefined: w.add(undefined_as_null ? "null" : "undefined"); return;
    case Kind::Int: case Kind::Float:
      w.add(std::isfinite(v.num) ? js::number_to_string(v.num) : "null");
      return;
    case Kind::Bool: w.add(v.b ? "true" : "false"); return;
    case Kind::String: {
      std::string q;
      js::append_quoted(q, v.str(), o.ensure_ascii);
      w.add(q);
      return;
    }
    case Kind::Array: case Kind::Object: case Kind::Namespace: break;
    default: throw RuntimeError(std::string("Cannot convert to JSON: ") + type_name(v.kind));
  }
  if (o.indent < 0) throw RuntimeError(strfmt("Invalid count value: %d", o.indent));
  const size_t pad = static_cast<size_t>(o.indent) * static_cast<size_t>(depth + 1);
  if (pad > w.budget.max_bytes) throw RuntimeError(strfmt("string longer than %zu bytes", w.budget.max_bytes));
  const std::string base = "\n" + std::string(static_cast<size_t>(o.indent) * static_cast<size_t>(depth), ' ');
  const std::string children = base + std::string(static_cast<size_t>(o.indent), ' ');
  const bool pretty = o.indent != 0;
  if (v.kind == Kind::Array) {
    const Array& a = v.arr();
    w.add("[");
    if (pretty && !a.empty()) w.add(children);
    for (size_t i = 0; i < a.size(); ++i) {
      if (i > 0) {
        w.add(item_sep);
        if (pretty) w.add(children);
      }
      write_json(w, a[i], o, undefined_as_null, depth + 1);
    }
    if (pretty && !a.empty()) w.add(base);
    w.add("]");
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& kv : v.dict().items()) entries.push_back(&kv);
  if (o.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto* x, const auto* y) { return locale_less(x->first, y->first); });
  }
  w.add("{");
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) w.add(item_sep);
    if (pretty) w.add(children);
    std::string key;
    js::append_quoted(key, entries[i]->first, o.ensure_ascii);
    w.add(key);
    w.add(key_sep);
    write_json(w, entries[i]->second, o, undefined_as_null, depth + 1);
  }
  if (pretty && !entries.empty()) w.add(base);
  w.add("}");
}

}  // namespace

std::string to_output(const Value& v, const TextBudget& budget) {
  std::string out;
  Writer w{out, budget};
  write_output(w, v, 0);
  return out;
}

std::string raw_to_string(const Value& v, const TextBudget& budget) {
  std::string out;
  Writer w{out, budget};
  write_raw(w, v, 0);
  return out;
}

std::string join_element(const Value& v, const TextBudget& budget) {
  if (v.is_undefined() || v.is_none()) return "";
  return raw_to_string(v, budget);
}

std::string to_json(const Value& v, const JsonOptions& opts, bool undefined_as_null, const TextBudget& budget) {
  std::string out;
  Writer w{out, budget};
  write_json(w, v, opts, undefined_as_null, 0);
  return out;
}

namespace {

// A JavaScript value reduced for `==`: its type and, for primitives, its value.
struct Prim {
  enum Type { Undef, Null, Bool, Num, Str, Obj };
  Type type;
  double num = 0;
  std::string str;
  const void* id = nullptr;

  static Prim of_type(Type t, double n = 0) {
    Prim p;
    p.type = t;
    p.num = n;
    return p;
  }
  static Prim of_string(std::string s) {
    Prim p = of_type(Str);
    p.str = std::move(s);
    return p;
  }
};

Prim prim_of(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return Prim::of_type(Prim::Undef);
    case Kind::None: return Prim::of_type(Prim::Null);
    case Kind::Bool: return Prim::of_type(Prim::Bool, v.b ? 1.0 : 0.0);
    case Kind::Int: case Kind::Float: return Prim::of_type(Prim::Num, v.num);
    case Kind::String: return Prim::of_string(v.str());
    default: {
      Prim p = Prim::of_type(Prim::Obj);
      p.id = v.identity();
      return p;
    }
  }
}

}  // namespace

bool loose_equal(const Value& a, const Value& b, const TextBudget& budget) {
  Prim x = prim_of(a), y = prim_of(b);
  for (int round = 0; round < 4; ++round) {
    if (x.type == y.type) {
      switch (x.type) {
        case Prim::Undef: case Prim::Null: return true;
        case Prim::Bool: case Prim::Num: return x.num == y.num;
        case Prim::Str: return x.str == y.str;
        case Prim::Obj: return x.id == y.id;
      }
    }
    const bool x_nullish = x.type == Prim::Undef || x.type == Prim::Null;
    const bool y_nullish = y.type == Prim::Undef || y.type == Prim::Null;
    if (x_nullish || y_nullish) return x_nullish && y_nullish;
    if (x.type == Prim::Num && y.type == Prim::Str) return x.num == js::string_to_number(y.str);
    if (x.type == Prim::Str && y.type == Prim::Num) return js::string_to_number(x.str) == y.num;
    if (x.type == Prim::Bool) {
      x.type = Prim::Num;
      continue;
    }
    if (y.type == Prim::Bool) {
      y.type = Prim::Num;
      continue;
    }
    // An object against a number or string: compare its primitive (String(value)).
    if (x.type == Prim::Obj) {
      x = Prim::of_string(raw_to_string(a, budget));
      continue;
    }
    if (y.type == Prim::Obj) {
      y = Prim::of_string(raw_to_string(b, budget));
      continue;
    }
    return false;
  }
  return false;
}

bool strict_equal(const Value& a, const Value& b) {
  const Prim x = prim_of(a), y = prim_of(b);
  if (x.type != y.type) return false;
  switch (x.type) {
    case Prim::Undef: case Prim::Null: return true;
    case Prim::Bool: case Prim::Num: return x.num == y.num;
    case Prim::Str: return x.str == y.str;
    case Prim::Obj: return x.id == y.id;
  }
  return false;
}

namespace {

constexpr int kMaxInputDepth = 256;

// Canonical array index ("0", "17"; not "01" or "4294967295"), which JavaScript objects order first.
bool array_index(const std::string& k, uint64_t* out) {
  if (k.empty() || k.size() > 10 || (k.size() > 1 && k[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : k) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= 4294967295ull) return false;
  *out = v;
  return true;
}

Value convert(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxInputDepth) throw Error(strfmt("jinja: input variable nested deeper than %d levels", kMaxInputDepth));
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(static_cast<double>(j.get<int64_t>()));
    case T::number_unsigned: return Value::integer(static_cast<double>(j.get<uint64_t>()));
    case T::number_float: {
      const double d = j.get<double>();
      return std::isfinite(d) && std::trunc(d) == d ? Value::integer(d) : Value::floating(d);
    }
    case T::string: return Value::string(j.get<std::string>());
    case T::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(convert(e, depth + 1));
      return Value::array(std::move(a));
    }
    case T::object: {
      std::vector<std::pair<uint64_t, const std::string*>> indices;
      for (auto it = j.begin(); it != j.end(); ++it) {
        uint64_t idx;
        if (array_index(it.key(), &idx)) indices.emplace_back(idx, &it.key());
      }
      std::sort(indices.begin(), indices.end());
      Dict d;
      for (const auto& [idx, key] : indices) d.set(*key, convert(j.at(*key), depth + 1));
      for (auto it = j.begin(); it != j.end(); ++it) {
        uint64_t idx;
        if (!array_index(it.key(), &idx)) d.set(it.key(), convert(it.value(), depth + 1));
      }
      return Value::dict(std::move(d));
    }
    default: return Value::undefined();
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  const auto cannot = [&](const char* how) {
    throw RuntimeError(strfmt(how, type_name(a.kind), type_name(b.kind)));
  };
  if (a.is_none() && b.is_none()) return 0;
  if (a.is_none() || b.is_none()) cannot("Cannot compare %s with %s");
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (a.is_undefined() || b.is_undefined()) cannot("Cannot compare %s with %s");
  if (a.is_numeric_like() && b.is_numeric_like()) {
    const double x = a.kind == Kind::Bool ? (a.b ? 1 : 0) : a.num;
    const double y = b.kind == Kind::Bool ? (b.b ? 1 : 0) : b.num;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind != b.kind) cannot("Cannot compare different types: %s and %s");
  if (a.kind != Kind::String) throw RuntimeError(std::string("Cannot compare type: ") + type_name(a.kind));
  if (case_sensitive) return js::compare(a.str(), b.str());
  return js::compare(js::to_lower(a.str()), js::to_lower(b.str()));
}

}  // namespace les::jinja
