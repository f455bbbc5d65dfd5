// Value / TensorInfo / File accessors.
#include <cstdint>
#include <limits>

#include "les/gguf/gguf.h"
#include "les/util/error.h"

namespace les::gguf {
namespace {

bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64 || t == ValueType::BOOL;
}

bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

std::string key_str(std::string_view key) { return std::string(key); }

[[noreturn]] void mismatch(std::string_view key, const char* expected, ValueType got) {
  throw Error(strfmt("gguf: key '%s': expected %s, got %s", key_str(key).c_str(), expected,
                     value_type_name(got)));
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

bool Value::is_int() const { return is_unsigned(type) || is_signed(type); }

bool Value::is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }

int64_t Value::as_int(std::string_view key) const {
  if (is_signed(type)) return i64;
  if (is_unsigned(type)) {
    if (u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw Error(strfmt("gguf: key '%s': value %llu does not fit in int64",
                         key_str(key).c_str(), static_cast<unsigned long long>(u64)));
    }
    return static_cast<int64_t>(u64);
  }
  mismatch(key, "an integer", type);
}

uint64_t Value::as_uint(std::string_view key) const {
  if (is_unsigned(type)) return u64;
  if (is_signed(type)) {
    if (i64 < 0) {
      throw Error(strfmt("gguf: key '%s': negative value %lld where an unsigned one is expected",
                         key_str(key).c_str(), static_cast<long long>(i64)));
    }
    return static_cast<uint64_t>(i64);
  }
  mismatch(key, "an unsigned integer", type);
}

double Value::as_float(std::string_view key) const {
  if (is_float()) return f64;
  if (is_signed(type)) return static_cast<double>(i64);
  if (is_unsigned(type)) return static_cast<double>(u64);
  mismatch(key, "a number", type);
}

bool Value::as_bool(std::string_view key) const {
  if (is_int()) {
    const bool zero = is_signed(type) ? i64 == 0 : u64 == 0;
    const bool one = is_signed(type) ? i64 == 1 : u64 == 1;
    if (!zero && !one) {
      throw Error(strfmt("gguf: key '%s': integer value is neither 0 nor 1, not a bool",
                         key_str(key).c_str()));
    }
    return one;
  }
  mismatch(key, "a bool", type);
}

const std::string& Value::as_string(std::string_view key) const {
  if (type == ValueType::STRING) return str;
  mismatch(key, "a string", type);
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : kv) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Value& File::get(std::string_view key) const {
  const Value* v = find(key);
  if (!v) throw Error(strfmt("gguf: missing key '%s'", key_str(key).c_str()));
  return *v;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

int64_t File::get_int(std::string_view key) const { return get(key).as_int(key); }

int64_t File::get_int(std::string_view key, int64_t def) const {
  const Value* v = find(key);
  return v ? v->as_int(key) : def;
}

double File::get_float(std::string_view key) const { return get(key).as_float(key); }

double File::get_float(std::string_view key, double def) const {
  const Value* v = find(key);
  return v ? v->as_float(key) : def;
}

std::string File::get_string(std::string_view key, std::string_view def) const {
  const Value* v = find(key);
  return v ? v->as_string(key) : std::string(def);
}

bool File::get_bool(std::string_view key, bool def) const {
  const Value* v = find(key);
  return v ? v->as_bool(key) : def;
}

}  // namespace les::gguf
