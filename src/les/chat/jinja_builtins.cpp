// Builtins of @huggingface/jinja: global functions, tests, filters, and the methods and
// properties of strings, arrays and objects. Which filters exist depends on the operand's type
// and on whether the filter is written with parentheses, exactly as there.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "les/chat/jinja_interp.h"
#include "les/chat/jinja_js.h"
#include "les/util/error.h"

namespace les::jinja {

namespace {

using Args = std::vector<Value>;

const Value* arg(const Args& a, size_t i) { return i < a.size() ? &a[i] : nullptr; }
const Value* kwarg(const Dict& kw, std::string_view key) { return kw.find(key); }
// args[i] ?? kwargs[key] ?? fallback
Value pick(const Args& a, size_t i, const Dict& kw, std::string_view key, Value fallback) {
  if (const Value* v = arg(a, i)) return *v;
  if (const Value* v = kwarg(kw, key)) return *v;
  return fallback;
}

Value method(std::function<Value(Interpreter&, Args&)> f) {
  return Value::function({[f = std::move(f)](Interpreter& in, Args& args, const EnvPtr&) { return f(in, args); }});
}

// ---- strings ----

bool is_word_byte(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// value.replace(/\b\w/g, c => c.toUpperCase()): ASCII word characters after a non-word one.
std::string title_case(const std::string& s) {
  std::string out = s;
  bool prev_word = false;
  for (char& c : out) {
    const bool word = is_word_byte(c);
    if (word && !prev_word && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    prev_word = word;
  }
  return out;
}

// charAt(0).toUpperCase() + slice(1): the first UTF-16 unit only.
std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  const js::Char c = js::decode_at(s, 0);
  if (c.cp >= 0x10000) return s;
  return js::to_upper(s.substr(0, c.len)) + s.substr(c.len);
}

std::string indent_lines(const std::string& s, size_t width, bool first, bool blank) {
  std::string out;
  const std::string pad(width, ' ');
  size_t line = 0, start = 0;
  while (true) {
    const size_t end = s.find('\n', start);
    const std::string_view l(s.data() + start, (end == std::string::npos ? s.size() : end) - start);
    if (line > 0) out += '\n';
    if (!((!first && line == 0) || (!blank && l.empty()))) out += pad;
    out += l;
    if (end == std::string::npos) break;
    start = end + 1;
    ++line;
  }
  return out;
}

// Python-style str.replace over code points, as @huggingface/jinja's replace() helper.
std::string replace_all(const Interpreter& in, const std::string& s, const std::string& from, const std::string& to,
                        double count) {
  if (count == 0) return s;
  double remaining = count < 0 ? HUGE_VAL : count;
  std::string out;
  const auto add = [&](std::string_view piece) {
    out += piece;
    in.check_size(out.size());
  };
  if (from.empty()) {
    for (std::string_view ch : js::code_points(s)) {
      if (remaining > 0) {
        add(to);
        --remaining;
      }
      add(ch);
    }
    if (remaining > 0) add(to);
    return out;
  }
  size_t pos = 0;
  while (remaining > 0) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    add(std::string_view(s).substr(pos, hit - pos));
    add(to);
    pos = hit + from.size();
    --remaining;
  }
  add(std::string_view(s).substr(pos));
  return out;
}

Value str_split(const Interpreter& in, const std::string& s, const Args& args) {
  const Value sep = args.size() > 0 ? args[0] : Value::none();
  if (!sep.is_string() && !sep.is_none()) throw RuntimeError("sep argument must be a string or null");
  const Value maxsplit = args.size() > 1 ? args[1] : Value::integer(-1);
  if (maxsplit.kind != Kind::Int) throw RuntimeError("maxsplit argument must be a number");
  const double max = maxsplit.num;
  Array parts;
  if (sep.is_none()) {
    // Runs of whitespace separate; no empty strings at the ends.
    const std::string_view text = js::trim_start(s);
    size_t i = 0;
    while (i < text.size()) {
      const size_t start = i;
      while (i < text.size() && !js::space_at(text, i)) i += js::decode_at(text, i).len;
      if (max != -1 && static_cast<double>(parts.size()) >= max) {
        parts.push_back(in.make_string(std::string(text.substr(start))));
        break;
      }
      parts.push_back(in.make_string(std::string(text.substr(start, i - start))));
      while (size_t n = js::space_at(text, i)) i += n;
    }
  } else {
    const std::string& d = sep.str();
    if (d.empty()) throw RuntimeError("empty separator");
    std::vector<std::string> pieces;
    size_t pos = 0;
    while (true) {
      const size_t hit = s.find(d, pos);
      if (hit == std::string::npos) break;
      pieces.push_back(s.substr(pos, hit - pos));
      pos = hit + d.size();
    }
    pieces.push_back(s.substr(pos));
    const double n = static_cast<double>(pieces.size());
    if (max != -1 && n > max) {
      // result.push(result.splice(maxsplit).join(sep))
      const double start = max < 0 ? std::max(n + max, 0.0) : std::min(max, n);
      const size_t k = static_cast<size_t>(start);
      std::string rest;
      for (size_t j = k; j < pieces.size(); ++j) {
        if (j > k) rest += d;
        rest += pieces[j];
      }
      pieces.resize(k);
      pieces.push_back(std::move(rest));
    }
    for (std::string& p : pieces) parts.push_back(in.make_string(std::move(p)));
  }
  return in.make_array(std::move(parts));
}

Value str_affix(const std::string& s, const Args& args, bool start) {
  const char* name = start ? "startswith" : "endswith";
  const auto has = [&](const std::string& p) {
    return p.size() <= s.size() && (start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
  };
  if (args.empty()) throw RuntimeError(std::string(name) + "() requires at least one argument");
  const Value& pattern = args[0];
  if (pattern.is_string()) return Value::boolean(has(pattern.str()));
  if (pattern.is_array()) {
    for (const Value& item : pattern.arr()) {
      if (!item.is_string()) throw RuntimeError(std::string(name) + "() tuple elements must be strings");
      if (has(item.str())) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  throw RuntimeError(std::string(name) + "() argument must be a string or tuple of strings");
}

Value str_replace(const Interpreter& in, const std::string& s, const Args& args) {
  if (args.size() < 2) throw RuntimeError("replace() requires at least two arguments");
  if (!args[0].is_string() || !args[1].is_string()) throw RuntimeError("replace() arguments must be strings");
  Value count = Value::none();
  if (args.size() > 2) {
    if (args[2].kind == Kind::KwArgs) {
      const Value* c = args[2].dict().find("count");
      count = c ? *c : Value::none();
    } else {
      count = args[2];
    }
  }
  if (count.kind != Kind::Int && !count.is_none()) throw RuntimeError("replace() count argument must be a number or null");
  return in.make_string(replace_all(in, s, args[0].str(), args[1].str(), count.is_none() ? -1 : count.num));
}

std::optional<Value> string_member(const Interpreter& in, const Value& self, const std::string& name) {
  const std::string& s = self.str();
  if (name == "length") return Value::integer(static_cast<double>(js::utf16_length(s)));
  // The methods keep the string alive through `self`.
  if (name == "upper") return method([self](Interpreter& i, Args&) { return i.make_string(js::to_upper(self.str())); });
  if (name == "lower") return method([self](Interpreter& i, Args&) { return i.make_string(js::to_lower(self.str())); });
  if (name == "strip") return method([self](Interpreter& i, Args&) { return i.make_string(std::string(js::trim(self.str()))); });
  if (name == "lstrip") {
    return method([self](Interpreter& i, Args&) { return i.make_string(std::string(js::trim_start(self.str()))); });
  }
  if (name == "rstrip") {
    return method([self](Interpreter& i, Args&) { return i.make_string(std::string(js::trim_end(self.str()))); });
  }
  if (name == "title") return method([self](Interpreter& i, Args&) { return i.make_string(title_case(self.str())); });
  if (name == "capitalize") return method([self](Interpreter& i, Args&) { return i.make_string(capitalize(self.str())); });
  if (name == "startswith") return method([self](Interpreter&, Args& a) { return str_affix(self.str(), a, true); });
  if (name == "endswith") return method([self](Interpreter&, Args& a) { return str_affix(self.str(), a, false); });
  if (name == "split") return method([self](Interpreter& i, Args& a) { return str_split(i, self.str(), a); });
  if (name == "replace") return method([self](Interpreter& i, Args& a) { return str_replace(i, self.str(), a); });
  (void)in;
  return std::nullopt;
}

// ---- objects ----

Value dict_items(const Interpreter& in, const Value& self) {
  Array items;
  for (const auto& [k, v] : self.dict().items()) items.push_back(in.make_array({Value::string(k), v}));
  return in.make_array(std::move(items));
}

Value dict_dictsort(const Interpreter& in, const Value& self, const Args& args) {
  Dict kw;
  Args positional;
  for (const Value& a : args) {
    if (a.kind == Kind::KwArgs) {
      kw = a.dict();
    } else {
      positional.push_back(a);
    }
  }
  const Value case_sensitive = pick(positional, 0, kw, "case_sensitive", Value::boolean(false));
  if (case_sensitive.kind != Kind::Bool) throw RuntimeError("case_sensitive must be a boolean");
  const Value by = pick(positional, 1, kw, "by", Value::string("key"));
  if (!by.is_string()) throw RuntimeError("by must be a string");
  if (by.str() != "key" && by.str() != "value") throw RuntimeError("by must be either 'key' or 'value'");
  const Value reverse = pick(positional, 2, kw, "reverse", Value::boolean(false));
  if (reverse.kind != Kind::Bool) throw RuntimeError("reverse must be a boolean");
  Array items = dict_items(in, self).arr();
  const size_t index = by.str() == "key" ? 0 : 1;
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int r = compare_values(a.arr()[index], b.arr()[index], case_sensitive.b);
    return (reverse.b ? -r : r) < 0;
  });
  return in.make_array(std::move(items));
}

std::optional<Value> object_member(const Value& self, const std::string& name) {
  if (name == "get") {
    return method([self](Interpreter&, Args& a) {
      const Value key = a.size() > 0 ? a[0] : Value::undefined();
      if (!key.is_string()) throw RuntimeError(std::string("Object key must be a string: got ") + type_name(key.kind));
      if (const Value* v = self.dict().find(key.str())) return *v;
      return a.size() > 1 ? a[1] : Value::none();
    });
  }
  if (name == "items") return method([self](Interpreter& i, Args&) { return dict_items(i, self); });
  if (name == "keys") {
    return method([self](Interpreter& i, Args&) {
      Array keys;
      for (const auto& kv : self.dict().items()) keys.push_back(Value::string(kv.first));
      return i.make_array(std::move(keys));
    });
  }
  if (name == "values") {
    return method([self](Interpreter& i, Args&) {
      Array values;
      for (const auto& kv : self.dict().items()) values.push_back(kv.second);
      return i.make_array(std::move(values));
    });
  }
  if (name == "dictsort") return method([self](Interpreter& i, Args& a) { return dict_dictsort(i, self, a); });
  return std::nullopt;
}

// ---- filters ----

// An attribute path "a.b.0" through objects, namespaces and arrays; undefined where it breaks off.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (v.is_attr_container()) {
      const Value* f = v.dict().find(part);
      v = f ? *f : Value::undefined();
    } else if (v.is_array()) {
      const double index = js::parse_int(part);
      if (std::isnan(index) || index < 0 || index >= static_cast<double>(v.arr().size())) return Value::undefined();
      v = Value(v.arr()[static_cast<size_t>(index)]);
    } else {
      return Value::undefined();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

bool is_test(const std::string& name) {
  static const char* kTests[] = {"boolean", "callable", "odd", "even", "false", "true", "none", "string",
                                 "number", "integer", "iterable", "mapping", "sequence", "lower", "upper",
                                 "defined", "undefined", "equalto", "eq"};
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* t) { return name == t; });
}

bool same_value_zero(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number() && std::isnan(a.num) && std::isnan(b.num)) return true;
  return strict_equal(a, b);
}

[[noreturn]] void cannot_apply(const std::string& name, const Value& v) {
  throw RuntimeError("Cannot apply filter \"" + name + "\" to type: " + type_name(v.kind));
}

Value filter_by_name(Interpreter& in, const Value& operand, const std::string& name) {
  if (name == "safe") return operand;
  if (name == "tojson") return in.make_string(to_json(operand, JsonOptions{}, true, in.budget()));
  if (operand.is_array()) {
    const Array& a = operand.arr();
    if (name == "list") return operand;
    if (name == "first") return a.empty() ? Value::undefined() : a.front();
    if (name == "last") return a.empty() ? Value::undefined() : a.back();
    if (name == "length") return Value::integer(static_cast<double>(a.size()));
    if (name == "reverse") return in.make_array(Array(a.rbegin(), a.rend()));
    if (name == "sort") {
      Array sorted = a;
      std::stable_sort(sorted.begin(), sorted.end(),
                       [](const Value& x, const Value& y) { return compare_values(x, y, false) < 0; });
      return in.make_array(std::move(sorted));
    }
    if (name == "join") {
      std::string out;
      for (const Value& x : a) {
        out += join_element(x, in.budget());
        in.check_size(out.size());
      }
      return in.make_string(std::move(out));
    }
    if (name == "string") return in.make_string(to_json(operand, JsonOptions{}, false, in.budget()));
    if (name == "unique") {
      Array out;
      for (const Value& x : a) {
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return same_value_zero(x, y); })) out.push_back(x);
      }
      return in.make_array(std::move(out));
    }
    throw RuntimeError("Unknown ArrayValue filter: " + name);
  }
  if (operand.is_string()) {
    const std::string& s = operand.str();
    if (name == "length") return Value::integer(static_cast<double>(js::utf16_length(s)));
    if (name == "upper") return in.make_string(js::to_upper(s));
    if (name == "lower") return in.make_string(js::to_lower(s));
    if (name == "title") return in.make_string(title_case(s));
    if (name == "capitalize") return in.make_string(capitalize(s));
    if (name == "trim") return in.make_string(std::string(js::trim(s)));
    if (name == "indent") return in.make_string(indent_lines(s, 4, false, false));
    if (name == "join" || name == "string") return operand;
    if (name == "int") {
      const double v = js::parse_int(s);
      return Value::integer(std::isnan(v) ? 0 : v);
    }
    if (name == "float") {
      const double v = js::parse_float(s);
      return Value::floating(std::isnan(v) ? 0 : v);
    }
    throw RuntimeError("Unknown StringValue filter: " + name);
  }
  if (operand.is_number()) {
    if (name == "abs") return operand.kind == Kind::Int ? Value::integer(std::fabs(operand.num)) : Value::floating(std::fabs(operand.num));
    if (name == "int") return Value::integer(std::floor(operand.num));
    if (name == "float") return Value::floating(operand.num);
    if (name == "string") return in.make_string(to_output(operand, in.budget()));
    throw RuntimeError("Unknown NumericValue filter: " + name);
  }
  if (operand.is_object()) {
    if (name == "items") return dict_items(in, operand);
    if (name == "length") return Value::integer(static_cast<double>(operand.dict().size()));
    if (const auto b = object_member(operand, name)) {
      Args none;
      return b->kind == Kind::Function ? in.call(*b, none, nullptr) : *b;
    }
    throw RuntimeError("Unknown ObjectValue filter: " + name);
  }
  if (operand.kind == Kind::Bool) {
    if (name == "bool") return operand;
    if (name == "int") return Value::integer(operand.b ? 1 : 0);
    if (name == "float") return Value::floating(operand.b ? 1 : 0);
    if (name == "string") return in.make_string(operand.b ? "true" : "false");
    throw RuntimeError("Unknown BooleanValue filter: " + name);
  }
  cannot_apply(name, operand);
}

Value filter_tojson(Interpreter& in, const Value& operand, const Dict& kw) {
  JsonOptions o;
  const Value indent = kwarg(kw, "indent") ? *kwarg(kw, "indent") : Value::none();
  if (indent.kind != Kind::Int && !indent.is_none()) throw RuntimeError("If set, indent must be a number");
  if (indent.kind == Kind::Int) {
    if (std::fabs(indent.num) > 1e6) throw RuntimeError("Invalid count value");
    o.indent = static_cast<int>(indent.num);
  }
  const Value ascii = kwarg(kw, "ensure_ascii") ? *kwarg(kw, "ensure_ascii") : Value::boolean(false);
  if (ascii.kind != Kind::Bool) throw RuntimeError("If set, ensure_ascii must be a boolean");
  o.ensure_ascii = ascii.b;
  const Value sort = kwarg(kw, "sort_keys") ? *kwarg(kw, "sort_keys") : Value::boolean(false);
  if (sort.kind != Kind::Bool) throw RuntimeError("If set, sort_keys must be a boolean");
  o.sort_keys = sort.b;
  const Value seps = kwarg(kw, "separators") ? *kwarg(kw, "separators") : Value::none();
  if (seps.is_array()) {
    if (seps.arr().size() != 2 || !seps.arr()[0].is_string() || !seps.arr()[1].is_string()) {
      throw RuntimeError("separators must be a tuple of two strings");
    }
    o.custom_separators = true;
    o.item_separator = seps.arr()[0].str();
    o.key_separator = seps.arr()[1].str();
  } else if (!seps.is_none()) {
    throw RuntimeError("If set, separators must be a tuple of two strings");
  }
  return in.make_string(to_json(operand, o, true, in.budget()));
}

Value filter_sort(const Interpreter& in, const Value& operand, const Args& args, const Dict& kw) {
  const Value reverse = pick(args, 0, kw, "reverse", Value::boolean(false));
  if (reverse.kind != Kind::Bool) throw RuntimeError("reverse must be a boolean");
  const Value case_sensitive = pick(args, 1, kw, "case_sensitive", Value::boolean(false));
  if (case_sensitive.kind != Kind::Bool) throw RuntimeError("case_sensitive must be a boolean");
  const Value attribute = pick(args, 2, kw, "attribute", Value::none());
  if (!attribute.is_string() && attribute.kind != Kind::Int && !attribute.is_none()) {
    throw RuntimeError("attribute must be a string, integer, or null");
  }
  const auto key = [&](const Value& item) {
    if (attribute.is_none()) return item;
    return attribute_path(item, attribute.is_string() ? attribute.str() : js::number_to_string(attribute.num));
  };
  Array sorted = operand.arr();
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Value& a, const Value& b) {
    const int r = compare_values(key(a), key(b), case_sensitive.b);
    return (reverse.b ? -r : r) < 0;
  });
  return in.make_array(std::move(sorted));
}

Value filter_selectattr(Interpreter& in, const Value& operand, const std::string& name, const CallNode& call,
                        const EnvPtr& env) {
  const bool select = name == "selectattr";
  for (const Value& item : operand.arr()) {
    if (!item.is_attr_container()) throw RuntimeError("`" + name + "` can only be applied to array of objects");
  }
  for (const NodePtr& a : call.args) {
    if (a->kind != NodeKind::StringLiteral) throw RuntimeError("arguments of `" + name + "` must be strings");
  }
  Args args;
  for (const NodePtr& a : call.args) args.push_back(in.eval(*a, env));
  const Value* test = arg(args, 1);
  const Value* value = arg(args, 2);
  if (test && !is_test(test->str())) throw RuntimeError("Unknown test: " + test->str());
  Array out;
  for (const Value& item : operand.arr()) {
    if (args.empty()) throw RuntimeError("Cannot read properties of undefined (reading 'value')");
    const Value* a = item.dict().find(args[0].str());
    bool result = false;
    if (a) result = test ? *run_test(test->str(), *a, value) : truthy(*a);
    if (result == select) out.push_back(item);
  }
  return in.make_array(std::move(out));
}

Value filter_map(const Interpreter& in, const Value& operand, const Dict& kw) {
  const Value* attr = kwarg(kw, "attribute");
  if (!attr) throw RuntimeError("`map` expressions without `attribute` set are not currently supported.");
  if (!attr->is_string()) throw RuntimeError("attribute must be a string");
  const Value* def = kwarg(kw, "default");
  Array out;
  for (const Value& item : operand.arr()) {
    if (!item.is_attr_container()) throw RuntimeError("items in map must be an object");
    const Value v = attribute_path(item, attr->str());
    out.push_back(v.is_undefined() && def ? *def : v);
  }
  return in.make_array(std::move(out));
}

Value filter_indent(Interpreter& in, const Value& operand, const Args& args, const Dict& kw) {
  const Value width = pick(args, 0, kw, "width", Value::integer(4));
  if (width.kind != Kind::Int) throw RuntimeError("width must be a number");
  if (width.num < 0 || width.num > static_cast<double>(in.limits().max_output_bytes)) {
    throw RuntimeError("Invalid count value: " + js::number_to_string(width.num));
  }
  const Value first = pick(args, 1, kw, "first", Value::boolean(false));
  const Value blank = pick(args, 2, kw, "blank", Value::boolean(false));
  const size_t lines = static_cast<size_t>(std::count(operand.str().begin(), operand.str().end(), '\n')) + 1;
  in.check_size(operand.str().size() + lines * static_cast<size_t>(width.num));
  return in.make_string(indent_lines(operand.str(), static_cast<size_t>(width.num), raw_truthy(first), raw_truthy(blank)));
}

Value filter_call(Interpreter& in, const Value& operand, const CallNode& call, const EnvPtr& env) {
  if (call.callee->kind != NodeKind::Identifier) throw RuntimeError(std::string("Unknown filter: ") + node_name(call.callee->kind));
  const std::string& name = call.callee->as<IdentifierNode>().name;
  if (name == "tojson") {
    const auto [args, kw] = in.eval_args(call.args, env);
    return filter_tojson(in, operand, kw);
  }
  if (name == "join") {
    std::vector<std::string> parts;
    if (operand.is_string()) {
      for (std::string_view c : js::code_points(operand.str())) parts.emplace_back(c);
    } else if (operand.is_array()) {
      for (const Value& x : operand.arr()) parts.push_back(join_element(x, in.budget()));
    } else {
      cannot_apply(name, operand);
    }
    const auto [args, kw] = in.eval_args(call.args, env);
    const Value sep = pick(args, 0, kw, "separator", Value::string(""));
    if (!sep.is_string()) throw RuntimeError("separator must be a string");
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) out += sep.str();
      out += parts[i];
      in.check_size(out.size());
    }
    return in.make_string(std::move(out));
  }
  if (name == "int" || name == "float") {
    const bool is_int = name == "int";
    const auto [args, kw] = in.eval_args(call.args, env);
    const Value def = pick(args, 0, kw, "default", is_int ? Value::integer(0) : Value::floating(0));
    if (operand.is_string()) {
      const double v = is_int ? js::parse_int(operand.str()) : js::parse_float(operand.str());
      if (std::isnan(v)) return def;
      return is_int ? Value::integer(v) : Value::floating(v);
    }
    if (operand.is_number()) return operand;
    if (operand.kind == Kind::Bool) return is_int ? Value::integer(operand.b ? 1 : 0) : Value::floating(operand.b ? 1 : 0);
    cannot_apply(name, operand);
  }
  if (name == "default") {
    const auto [args, kw] = in.eval_args(call.args, env);
    const Value def = args.size() > 0 ? args[0] : Value::string("");
    const Value boolean = pick(args, 1, kw, "boolean", Value::boolean(false));
    if (boolean.kind != Kind::Bool) throw RuntimeError("`default` filter flag must be a boolean");
    if (operand.is_undefined() || (boolean.b && !truthy(operand))) return def;
    return operand;
  }
  if (operand.is_array()) {
    if (name == "sort") {
      const auto [args, kw] = in.eval_args(call.args, env);
      return filter_sort(in, operand, args, kw);
    }
    if (name == "selectattr" || name == "rejectattr") return filter_selectattr(in, operand, name, call, env);
    if (name == "map") {
      const auto [args, kw] = in.eval_args(call.args, env);
      return filter_map(in, operand, kw);
    }
    throw RuntimeError("Unknown ArrayValue filter: " + name);
  }
  if (operand.is_string()) {
    if (name == "indent") {
      const auto [args, kw] = in.eval_args(call.args, env);
      return filter_indent(in, operand, args, kw);
    }
    if (name == "replace") {
      auto [args, kw] = in.eval_args(call.args, env);
      args.push_back(Value::dict(kw, Kind::KwArgs));
      return str_replace(in, operand.str(), args);
    }
    throw RuntimeError("Unknown StringValue filter: " + name);
  }
  if (operand.is_object()) {
    const auto b = object_member(operand, name);
    if (b && b->kind == Kind::Function) {
      auto [args, kw] = in.eval_args(call.args, env);
      if (kw.size() > 0) args.push_back(Value::dict(std::move(kw), Kind::KwArgs));
      return in.call(*b, args, env);
    }
    throw RuntimeError("Unknown ObjectValue filter: " + name);
  }
  cannot_apply(name, operand);
}

// ---- globals ----

double range_number(const Value& v) {
  if (v.is_number()) return v.num;
  if (v.kind == Kind::Bool) return v.b ? 1 : 0;
  if (v.is_none()) return 0;
  throw RuntimeError(std::string("range() arguments must be numbers, got ") + type_name(v.kind));
}

Value global_range(Interpreter& in, Args& args) {
  const auto given = [&](size_t i) { return i < args.size() && !args[i].is_undefined(); };
  double start = given(0) ? range_number(args[0]) : NAN;
  double stop;
  if (given(1)) {
    stop = range_number(args[1]);
  } else {
    stop = start;
    start = 0;
  }
  const double step = given(2) ? range_number(args[2]) : 1;
  if (step == 0) throw RuntimeError("range() step must not be zero");
  Array out;
  const auto push = [&](double i) {
    if (out.size() >= in.limits().max_array_size) {
      throw RuntimeError(strfmt("array longer than %zu elements (RenderLimits::max_array_size)", in.limits().max_array_size));
    }
    out.push_back(std::trunc(i) == i ? Value::integer(i) : Value::floating(i));
  };
  if (step > 0) {
    for (double i = start; i < stop; i += step) push(i);
  } else {
    for (double i = start; i > stop; i += step) push(i);
  }
  return in.make_array(std::move(out));
}

Value global_namespace(Interpreter& in, Args& args) {
  Args positional = args;
  Dict kw;
  if (!positional.empty() && positional.back().kind == Kind::KwArgs) {
    kw = positional.back().dict();
    positional.pop_back();
  }
  if (positional.size() > 1) throw RuntimeError(strfmt("namespace expected at most 1 argument, got %zu", positional.size()));
  Dict entries;
  if (positional.size() == 1) {
    const Value& source = positional[0];
    if (source.is_object()) {
      for (const auto& [k, v] : source.dict().items()) entries.set(k, v);
    } else if (source.is_array()) {
      for (const Value& pair : source.arr()) {
        Array kv;
        if (pair.is_array()) {
          kv = pair.arr();
        } else if (pair.is_string()) {
          for (std::string_view c : js::code_points(pair.str())) kv.push_back(Value::string(std::string(c)));
        }
        if (kv.size() != 2) throw RuntimeError("namespace expected an object or an iterable of [key, value] pairs");
        if (!kv[0].is_string()) throw RuntimeError("namespace keys must be strings");
        entries.set(kv[0].str(), kv[1]);
      }
    } else {
      throw RuntimeError(std::string("'") + type_name(source.kind) + "' object is not iterable");
    }
  }
  for (const auto& [k, v] : kw.items()) entries.set(k, v);
  return in.make_namespace(std::move(entries));
}

Value global_strftime_now(const Interpreter& in, Args& args) {
  const std::string format = !args.empty() && args[0].is_string() ? args[0].str() : "";
  static const char* kMonths[] = {"January", "February", "March", "April", "May", "June", "July",
                                  "August", "September", "October", "November", "December"};
  const LocalTime now = in.now();
  const auto pad2 = [](int v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%02d", v);
    return std::string(buf);
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out += format[i];
      continue;
    }
    const char c = format[i + 1];
    switch (c) {
      case 'Y': out += std::to_string(now.year); break;
      case 'm': out += pad2(now.month); break;
      case 'd': out += pad2(now.day); break;
      case 'b': out += std::string(kMonths[now.month - 1]).substr(0, 3); break;
      case 'B': out += kMonths[now.month - 1]; break;
      case 'H': out += pad2(now.hour); break;
      case 'M': out += pad2(now.minute); break;
      case '%': out += '%'; break;
      default: out += format[i]; continue;
    }
    ++i;
  }
  return Value::string(std::move(out));
}

}  // namespace

void install_globals(Env& global) {
  global.set("namespace", Value::function({[](Interpreter& in, Args& a, const EnvPtr&) { return global_namespace(in, a); }}));
  global.set("false", Value::boolean(false));
  global.set("true", Value::boolean(true));
  global.set("none", Value::none());
  global.set("raise_exception", Value::function({[](Interpreter& in, Args& a, const EnvPtr&) -> Value {
               // new Error(value): the message is String(value), or empty without an argument.
               throw RuntimeError(a.empty() || a[0].is_undefined() ? std::string() : raw_to_string(a[0], in.budget()));
             }}));
  global.set("range", Value::function({[](Interpreter& in, Args& a, const EnvPtr&) { return global_range(in, a); }}));
  global.set("strftime_now", Value::function({[](Interpreter& in, Args& a, const EnvPtr&) { return global_strftime_now(in, a); }}));
  global.set("True", Value::boolean(true));
  global.set("False", Value::boolean(false));
  global.set("None", Value::none());
}

std::optional<Value> builtin_member(const Interpreter& in, const Value& object, const std::string& name) {
  if (object.is_string()) return string_member(in, object, name);
  if (object.is_array()) {
    if (name == "length") return Value::integer(static_cast<double>(object.arr().size()));
    return std::nullopt;
  }
  if (object.is_object()) return object_member(object, name);
  return std::nullopt;
}

Value apply_filter(Interpreter& in, const Value& operand, const Node& filter, const EnvPtr& env) {
  if (filter.kind == NodeKind::Identifier) return filter_by_name(in, operand, filter.as<IdentifierNode>().name);
  if (filter.kind == NodeKind::Call) return filter_call(in, operand, filter.as<CallNode>(), env);
  throw RuntimeError(std::string("Unknown filter: ") + node_name(filter.kind));
}

std::optional<bool> run_test(const std::string& name, const Value& v, const Value* arg) {
  if (name == "boolean") return v.kind == Kind::Bool;
  if (name == "callable") return v.kind == Kind::Function;
  if (name == "odd" || name == "even") {
    if (v.kind != Kind::Int) throw RuntimeError("cannot " + name + " on " + type_name(v.kind));
    const double r = std::fmod(v.num, 2);
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "false") return v.kind == Kind::Bool && !v.b;
  if (name == "true") return v.kind == Kind::Bool && v.b;
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::Int;
  if (name == "iterable") return v.kind == Kind::Array || v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "lower") return v.is_string() && v.str() == js::to_lower(v.str());
  if (name == "upper") return v.is_string() && v.str() == js::to_upper(v.str());
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "equalto" || name == "eq") {
    if (!arg) throw RuntimeError("Cannot read properties of undefined (reading 'value')");
    return strict_equal(v, *arg);
  }
  return std::nullopt;
}

}  // namespace les::jinja
