#include "les/cache/trace.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "les/util/atomic_file.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les::cache {

namespace {

struct TypeInfo {
  NpyType type;
  const char* name;
  size_t size;
};

constexpr TypeInfo kTypes[] = {
    {NpyType::U8, "u1", 1},  {NpyType::I8, "i1", 1},  {NpyType::U16, "u2", 2}, {NpyType::I16, "i2", 2},
    {NpyType::U32, "u4", 4}, {NpyType::I32, "i4", 4}, {NpyType::U64, "u8", 8}, {NpyType::I64, "i8", 8},
    {NpyType::F16, "f2", 2}, {NpyType::F32, "f4", 4}, {NpyType::F64, "f8", 8},
};

// Cursor over the header dict text, a Python literal such as
// {'descr': '<f2', 'fortran_order': False, 'shape': (2048, 8, 64), }
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& name) : s_(text), name_(name) {}

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool peek(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(strfmt("expected '%c'", c));
    ++i_;
  }
  std::string string_lit() {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a string");
    const char q = s_[i_++];
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) fail("unterminated string");
    return s_.substr(start, i_++ - start);
  }
  bool bool_lit() {
    skip_ws();
    if (s_.compare(i_, 4, "True") == 0) { i_ += 4; return true; }
    if (s_.compare(i_, 5, "False") == 0) { i_ += 5; return false; }
    fail("expected True or False");
  }
  std::vector<size_t> shape_lit() {
    std::vector<size_t> shape;
    expect('(');
    while (!peek(')')) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail("expected a dimension");
      uint64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (v > (std::numeric_limits<uint64_t>::max() - 9) / 10) fail("dimension overflows");
        v = v * 10 + static_cast<uint64_t>(s_[i_++] - '0');
      }
      shape.push_back(static_cast<size_t>(v));
      if (peek(',')) ++i_;
      else if (!peek(')')) fail("expected ',' or ')' in shape");
    }
    ++i_;
    return shape;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(strfmt("%s: .npy header: %s at offset %zu of header '%s'", name_.c_str(), what.c_str(), i_,
                       s_.c_str()));
  }
  size_t pos() const { return i_; }
  size_t size() const { return s_.size(); }

 private:
  const std::string& s_;
  const std::string& name_;
  size_t i_ = 0;
};

NpyType parse_descr(const std::string& d, HeaderParser& p) {
  if (d.size() != 3) p.fail("unsupported dtype '" + d + "'");
  const char order = d[0];
  const std::string code = d.substr(1);
  for (const TypeInfo& t : kTypes) {
    if (code != t.name) continue;
    if (order == '>' && t.size > 1) p.fail("big-endian dtype '" + d + "' is not supported");
    if (order != '<' && order != '|' && order != '>') p.fail("bad byte order in dtype '" + d + "'");
    if (order == '|' && t.size > 1) p.fail("dtype '" + d + "' needs a byte order");
    return t.type;
  }
  p.fail("unsupported dtype '" + d + "'");
}

}  // namespace

const char* npy_type_name(NpyType t) {
  for (const TypeInfo& i : kTypes) if (i.type == t) return i.name;
  return "?";
}

size_t npy_type_size(NpyType t) {
  for (const TypeInfo& i : kTypes) if (i.type == t) return i.size;
  return 0;
}

size_t NpyArray::count() const {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

double NpyArray::get_f64(size_t i) const {
  const uint8_t* p = data.data() + i * npy_type_size(type);
  switch (type) {
    case NpyType::F16: { uint16_t h; std::memcpy(&h, p, 2); return fp16_to_f32(h); }
    case NpyType::F32: { float f; std::memcpy(&f, p, 4); return f; }
    case NpyType::F64: { double f; std::memcpy(&f, p, 8); return f; }
    default: return static_cast<double>(get_i64(i));
  }
}

int64_t NpyArray::get_i64(size_t i) const {
  const uint8_t* p = data.data() + i * npy_type_size(type);
  switch (type) {
    case NpyType::U8: return p[0];
    case NpyType::I8: return static_cast<int8_t>(p[0]);
    case NpyType::U16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case NpyType::I16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case NpyType::U32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case NpyType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case NpyType::U64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<int64_t>(v); }
    case NpyType::I64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    default: return static_cast<int64_t>(get_f64(i));
  }
}

NpyArray parse_npy(const uint8_t* b, size_t size, const std::string& name) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(b, kMagic, 6) != 0) {
    throw Error(strfmt("%s: not a .npy file (bad magic or shorter than 10 bytes, size %zu)", name.c_str(), size));
  }
  const int major = b[6];
  const int minor = b[7];
  size_t header_len = 0;
  size_t prefix = 0;
  if (major == 1) {
    header_len = static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8;
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw Error(strfmt("%s: .npy v%d header length truncated", name.c_str(), major));
    header_len = static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8 | static_cast<size_t>(b[10]) << 16 |
                 static_cast<size_t>(b[11]) << 24;
    prefix = 12;
  } else {
    throw Error(strfmt("%s: unsupported .npy format version %d.%d", name.c_str(), major, minor));
  }
  if (header_len > size - prefix) {
    throw Error(strfmt("%s: .npy header truncated: header length %zu, only %zu bytes follow", name.c_str(),
                       header_len, size - prefix));
  }
  const std::string text(reinterpret_cast<const char*>(b + prefix), header_len);
  HeaderParser p(text, name);

  NpyArray a;
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  p.expect('{');
  while (!p.peek('}')) {
    const std::string key = p.string_lit();
    p.expect(':');
    if (key == "descr" && !have_descr) {
      a.type = parse_descr(p.string_lit(), p);
      have_descr = true;
    } else if (key == "fortran_order" && !have_order) {
      fortran = p.bool_lit();
      have_order = true;
    } else if (key == "shape" && !have_shape) {
      a.shape = p.shape_lit();
      have_shape = true;
    } else {
      p.fail("unexpected or repeated key '" + key + "'");
    }
    if (p.peek(',')) p.expect(',');
    else if (!p.peek('}')) p.fail("expected ',' or '}'");
  }
  p.expect('}');
  p.skip_ws();
  if (p.pos() != p.size()) p.fail("trailing characters after the dict");
  if (!have_descr || !have_order || !have_shape) p.fail("missing 'descr', 'fortran_order' or 'shape'");
  if (fortran) p.fail("fortran_order=True is not supported");

  const size_t esize = npy_type_size(a.type);
  size_t n = 1;
  for (size_t d : a.shape) {
    if (d != 0 && n > std::numeric_limits<size_t>::max() / esize / d) p.fail("shape overflows");
    n *= d;
  }
  const size_t data_off = prefix + header_len;
  const size_t nbytes = n * esize;
  if (size - data_off != nbytes) {
    throw Error(strfmt("%s: .npy data size mismatch: dtype %s shape of %zu elements needs %zu bytes, file has %zu "
                       "after the %zu-byte header",
                       name.c_str(), npy_type_name(a.type), n, nbytes, size - data_off, data_off));
  }
  a.data.assign(b + data_off, b + size);
  return a;
}

std::vector<uint8_t> encode_npy(NpyType type, const std::vector<size_t>& shape, const void* data, size_t bytes) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  if (n * npy_type_size(type) != bytes) {
    throw Error(strfmt("encode_npy: %zu bytes for %zu elements of %s", bytes, n, npy_type_name(type)));
  }
  const char order = npy_type_size(type) == 1 ? '|' : '<';
  std::string dims;  // "2, 3"; a 1-D shape keeps Python's trailing comma: "(5,)"
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = strfmt("{'descr': '%c%s', 'fortran_order': False, 'shape': (%s), }", order, npy_type_name(type),
                              dims.c_str());
  // Magic (6) + version (2) + length (2) + header + '\n', padded with spaces to a multiple of 64.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  std::vector<uint8_t> out(total + bytes);
  const uint8_t magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(header.size() & 0xff),
                             static_cast<uint8_t>(header.size() >> 8)};
  std::memcpy(out.data(), magic, sizeof magic);
  std::memcpy(out.data() + sizeof magic, header.data(), header.size());
  if (bytes) std::memcpy(out.data() + total, data, bytes);
  return out;
}

void save_npy(const std::string& path, NpyType type, const std::vector<size_t>& shape, const void* data, size_t bytes) {
  const std::vector<uint8_t> img = encode_npy(type, shape, data, bytes);
  write_file_atomic(path, img.data(), img.size());
}

NpyArray load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(strfmt("%s: cannot open .npy file", path.c_str()));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error(strfmt("%s: read error", path.c_str()));
  return parse_npy(bytes.data(), bytes.size(), path);
}

RoutingTrace make_routing_trace(const NpyArray& ex, const NpyArray* probs, const std::string& name, int n_experts) {
  switch (ex.type) {
    case NpyType::F16: case NpyType::F32: case NpyType::F64:
      throw Error(strfmt("%s: expert ids must be an integer array, got dtype %s", name.c_str(),
                         npy_type_name(ex.type)));
    default: break;
  }
  if (ex.shape.size() != 3) {
    throw Error(strfmt("%s: expert ids must have shape [tokens][layers][k], got %zu dimensions", name.c_str(),
                       ex.shape.size()));
  }
  constexpr size_t kMaxDim = 1u << 30;
  if (ex.shape[0] == 0 || ex.shape[1] == 0 || ex.shape[2] == 0 || ex.shape[0] > kMaxDim ||
      ex.shape[1] > 0xffff || ex.shape[2] > 0xffff) {
    throw Error(strfmt("%s: bad trace shape (%zu, %zu, %zu)", name.c_str(), ex.shape[0], ex.shape[1], ex.shape[2]));
  }
  RoutingTrace tr;
  tr.n_tokens = static_cast<int>(ex.shape[0]);
  tr.n_layers = static_cast<int>(ex.shape[1]);
  tr.top_k = static_cast<int>(ex.shape[2]);
  const size_t n = ex.count();
  tr.experts.resize(n);
  int64_t max_id = -1;
  for (size_t i = 0; i < n; ++i) {
    const int64_t v = ex.get_i64(i);
    if (v < 0 || v > 0xffff) {
      throw Error(strfmt("%s: expert id %lld at element %zu out of range [0, 65535]", name.c_str(),
                         static_cast<long long>(v), i));
    }
    tr.experts[i] = static_cast<int32_t>(v);
    if (v > max_id) max_id = v;
  }
  tr.n_experts = static_cast<int>(max_id + 1);
  if (n_experts > 0) {
    if (max_id >= n_experts) {
      throw Error(strfmt("%s: expert id %lld out of range: the model has %d experts", name.c_str(),
                         static_cast<long long>(max_id), n_experts));
    }
    tr.n_experts = n_experts;
  }
  // A token selects each expert of a layer at most once.
  for (int t = 0; t < tr.n_tokens; ++t) {
    for (int l = 0; l < tr.n_layers; ++l) {
      const int32_t* sel = tr.selected(t, l);
      for (int j = 1; j < tr.top_k; ++j) {
        if (std::find(sel, sel + j, sel[j]) != sel + j) {
          throw Error(strfmt("%s: token %d, layer %d selects expert %d twice", name.c_str(), t, l, sel[j]));
        }
      }
    }
  }
  if (probs) {
    if (probs->type != NpyType::F16 && probs->type != NpyType::F32 && probs->type != NpyType::F64) {
      throw Error(strfmt("%s: router probs must be a float array, got dtype %s", name.c_str(),
                         npy_type_name(probs->type)));
    }
    if (probs->shape.size() != 3 || probs->shape[0] != ex.shape[0] || probs->shape[1] != ex.shape[1] ||
        probs->shape[2] == 0 || probs->shape[2] > 0x10000) {
      throw Error(strfmt("%s: router probs shape must be [%zu][%zu][E]", name.c_str(), ex.shape[0], ex.shape[1]));
    }
    const int e = static_cast<int>(probs->shape[2]);
    if (max_id >= e) {
      throw Error(strfmt("%s: expert id %lld >= %d experts of the router probs", name.c_str(),
                         static_cast<long long>(max_id), e));
    }
    tr.n_experts = e;
    tr.probs.resize(probs->count());
    for (size_t i = 0; i < tr.probs.size(); ++i) tr.probs[i] = static_cast<float>(probs->get_f64(i));
  }
  return tr;
}

void set_sequence_starts(RoutingTrace& tr, const NpyArray& st, const std::string& name) {
  switch (st.type) {
    case NpyType::F16: case NpyType::F32: case NpyType::F64:
      throw Error(strfmt("%s: sequence starts must be an integer array, got dtype %s", name.c_str(), npy_type_name(st.type)));
    default: break;
  }
  if (st.shape.size() != 1 || st.shape[0] == 0) {
    throw Error(strfmt("%s: sequence starts must be a non-empty 1-D array", name.c_str()));
  }
  tr.starts.clear();
  for (size_t i = 0; i < st.count(); ++i) {
    const int64_t v = st.get_i64(i);
    if (i == 0 && v != 0) throw Error(strfmt("%s: the first sequence must start at token 0, not %lld", name.c_str(), static_cast<long long>(v)));
    if (v < 0 || v >= tr.n_tokens) {
      throw Error(strfmt("%s: sequence start %lld (index %zu) outside the trace's %d tokens", name.c_str(),
                         static_cast<long long>(v), i, tr.n_tokens));
    }
    if (i > 0 && v <= tr.starts.back()) {
      throw Error(strfmt("%s: sequence starts out of order: %lld after %d (index %zu)", name.c_str(),
                         static_cast<long long>(v), tr.starts.back(), i));
    }
    tr.starts.push_back(static_cast<int32_t>(v));
  }
}

RoutingTrace load_routing_trace(const std::string& experts_path, const std::string& probs_path,
                                const std::string& starts_path, int n_experts) {
  const NpyArray ex = load_npy(experts_path);
  RoutingTrace tr;
  if (probs_path.empty()) {
    tr = make_routing_trace(ex, nullptr, experts_path, n_experts);
  } else {
    const NpyArray pr = load_npy(probs_path);
    tr = make_routing_trace(ex, &pr, experts_path + " + " + probs_path, n_experts);
  }
  if (!starts_path.empty()) set_sequence_starts(tr, load_npy(starts_path), starts_path);
  return tr;
}

}  // namespace les::cache
