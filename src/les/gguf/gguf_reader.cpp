// GGUF parser: a pure function over (data, size) with every read bounds-checked, and read_file,
// which feeds it a growing prefix of the file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <system_error>
#include <unordered_set>

#include "les/gguf/gguf.h"
#include "les/util/error.h"

namespace les::gguf {
namespace {

// Internal signal: the buffer is a prefix of the file and parsing needs bytes up to `end`
// (which lie inside the file). Never escapes this file.
struct NeedMore {
  uint64_t end;
};

constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::FLOAT64);

// Bytes one value of type t takes at least on disk (strings: the length; arrays: type + count).
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 12;
  }
  return 1;
}

// An untrusted string made safe for an error message: at most 64 bytes, non-printables escaped.
std::string printable(std::string_view s) {
  std::string out;
  const size_t n = std::min<size_t>(s.size(), 64);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      out += strfmt("\\x%02x", c);
    }
  }
  if (s.size() > n) out += "...";
  return out;
}

using ull = unsigned long long;

class Parser {
 public:
  Parser(const uint8_t* data, size_t size, uint64_t file_size, std::string_view what)
      : d_(data), size_(size), file_size_(file_size), what_(what) {}

  File run();

 private:
  const uint8_t* d_;
  uint64_t size_;       // bytes available in d_
  uint64_t file_size_;  // bytes in the file (>= size_)
  std::string what_;
  uint64_t pos_ = 0;
  uint64_t n_values_ = 0;     // keys + array elements so far, against kMaxValues
  std::string ctx_ = "header";  // what is being parsed, for messages

  [[noreturn]] void fail(uint64_t off, const std::string& msg) const {
    throw Error(strfmt("%s: %s at offset %llu: %s", what_.c_str(), ctx_.c_str(), ull(off),
                       msg.c_str()));
  }
  uint64_t left_in_file() const { return file_size_ - pos_; }
  // Ensures n bytes at pos_ are readable: a les::Error if the file is too short, NeedMore if
  // only the buffer is.
  void need(uint64_t n) {
    if (n > left_in_file()) {
      fail(pos_, strfmt("truncated: need %llu bytes, only %llu left in the file (%llu bytes)",
                        ull(n), ull(left_in_file()), ull(file_size_)));
    }
    if (n > size_ - pos_) throw NeedMore{pos_ + n};
  }
  uint64_t rd_le(unsigned n) {
    need(n);
    uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i) v |= uint64_t(d_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  uint8_t rd_u8() { return static_cast<uint8_t>(rd_le(1)); }
  uint16_t rd_u16() { return static_cast<uint16_t>(rd_le(2)); }
  uint32_t rd_u32() { return static_cast<uint32_t>(rd_le(4)); }
  uint64_t rd_u64() { return rd_le(8); }
  std::string rd_string(const char* what);
  ValueType rd_value_type(const char* what);
  Value rd_value(ValueType t, int depth);
  // Counts n more values against kMaxValues.
  void add_values(uint64_t off, uint64_t n) {
    if (n > kMaxValues - n_values_) {
      fail(off, strfmt("too many metadata values (more than %llu in the file)", ull(kMaxValues)));
    }
    n_values_ += n;
  }
  void read_kv(File& f, uint64_t i, std::unordered_set<std::string>& keys);
  void read_tensor_info(File& f, uint64_t i, std::unordered_set<std::string>& names,
                        std::vector<uint64_t>& info_offsets);
  void check_extents(File& f, const std::vector<uint64_t>& info_offsets);
};

std::string Parser::rd_string(const char* what) {
  const uint64_t off = pos_;
  const uint64_t len = rd_u64();
  if (len > kMaxStringBytes) {
    fail(off, strfmt("%s length %llu exceeds the limit of %llu bytes", what, ull(len),
                     ull(kMaxStringBytes)));
  }
  if (len > left_in_file()) {
    fail(off, strfmt("%s length %llu exceeds the %llu bytes left in the file", what, ull(len),
                     ull(left_in_file())));
  }
  need(len);
  std::string s(reinterpret_cast<const char*>(d_ + pos_), static_cast<size_t>(len));
  pos_ += len;
  return s;
}

ValueType Parser::rd_value_type(const char* what) {
  const uint64_t off = pos_;
  const uint32_t t = rd_u32();
  if (t > kMaxValueType) fail(off, strfmt("unknown %s %u", what, t));
  return static_cast<ValueType>(t);
}

Value Parser::rd_value(ValueType t, int depth) {
  Value v;
  v.type = t;
  const uint64_t off = pos_;
  switch (t) {
    case ValueType::UINT8: v.u64 = rd_u8(); break;
    case ValueType::UINT16: v.u64 = rd_u16(); break;
    case ValueType::UINT32: v.u64 = rd_u32(); break;
    case ValueType::UINT64: v.u64 = rd_u64(); break;
    case ValueType::INT8: v.i64 = static_cast<int8_t>(rd_u8()); break;
    case ValueType::INT16: v.i64 = static_cast<int16_t>(rd_u16()); break;
    case ValueType::INT32: v.i64 = static_cast<int32_t>(rd_u32()); break;
    case ValueType::INT64: v.i64 = static_cast<int64_t>(rd_u64()); break;
    case ValueType::FLOAT32: {
      const uint32_t bits = rd_u32();
      float f;
      std::memcpy(&f, &bits, sizeof f);
      v.f64 = f;
      break;
    }
    case ValueType::FLOAT64: {
      const uint64_t bits = rd_u64();
      std::memcpy(&v.f64, &bits, sizeof v.f64);
      break;
    }
    case ValueType::BOOL: {
      const uint8_t b = rd_u8();
      if (b > 1) fail(off, strfmt("invalid bool value %u (must be 0 or 1)", b));
      v.u64 = b;
      break;
    }
    case ValueType::STRING: v.str = rd_string("string"); break;
    case ValueType::ARRAY: {
      if (depth >= kMaxArrayDepth) {
        fail(off, strfmt("arrays nested deeper than %d levels", kMaxArrayDepth));
      }
      v.elem_type = rd_value_type("array element type");
      const uint64_t count_off = pos_;
      const uint64_t count = rd_u64();
      const uint64_t min_bytes = min_value_bytes(v.elem_type);
      if (count > left_in_file() / min_bytes) {
        fail(count_off, strfmt("array of %llu %s elements does not fit in the %llu bytes left",
                               ull(count), value_type_name(v.elem_type), ull(left_in_file())));
      }
      add_values(count_off, count);
      // Reserve only what the bytes at hand can hold; the rest grows as elements are read.
      v.arr.reserve(static_cast<size_t>(std::min(count, (size_ - pos_) / min_bytes)));
      for (uint64_t i = 0; i < count; ++i) v.arr.push_back(rd_value(v.elem_type, depth + 1));
      break;
    }
  }
  return v;
}

void Parser::read_kv(File& f, uint64_t i, std::unordered_set<std::string>& keys) {
  ctx_ = strfmt("key #%llu", ull(i));
  const uint64_t key_off = pos_;
  std::string key = rd_string("key");
  ctx_ = "key '" + printable(key) + "'";
  if (!keys.insert(key).second) fail(key_off, "duplicate key");
  const ValueType t = rd_value_type("value type");
  const uint64_t val_off = pos_;
  Value v = rd_value(t, 0);
  if (key == "general.alignment") {
    if (t != ValueType::UINT32) {
      fail(val_off, strfmt("must be of type uint32, not %s", value_type_name(t)));
    }
    if (v.u64 == 0 || (v.u64 & (v.u64 - 1)) != 0) {
      fail(val_off, strfmt("alignment %llu is not a nonzero power of two", ull(v.u64)));
    }
    f.alignment = v.u64;
  }
  f.kv.emplace_back(std::move(key), std::move(v));
}

void Parser::read_tensor_info(File& f, uint64_t i, std::unordered_set<std::string>& names,
                              std::vector<uint64_t>& info_offsets) {
  ctx_ = strfmt("tensor #%llu", ull(i));
  const uint64_t info_off = pos_;
  TensorInfo ti;
  ti.name = rd_string("tensor name");
  ctx_ = "tensor '" + printable(ti.name) + "'";
  if (!names.insert(ti.name).second) fail(info_off, "duplicate tensor name");
  const uint64_t dims_off = pos_;
  const uint32_t n_dims = rd_u32();
  if (n_dims < 1 || n_dims > kMaxDims) {
    fail(dims_off, strfmt("n_dims %u out of range 1..%u", n_dims, kMaxDims));
  }
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t off = pos_;
    const uint64_t ne = rd_u64();
    if (ne > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail(off, strfmt("dimension ne[%u] is negative (%lld)", d, static_cast<long long>(ne)));
    }
    ti.ne.push_back(static_cast<int64_t>(ne));
  }
  const uint64_t type_off = pos_;
  const uint32_t type_id = rd_u32();
  const std::optional<TypeInfo> tinfo = type_info(type_id);
  if (!tinfo) fail(type_off, strfmt("unknown type id %u", type_id));
  ti.type = static_cast<Type>(type_id);
  const uint64_t offset_off = pos_;
  ti.offset = rd_u64();

  int64_t n = 1;
  for (int64_t d : ti.ne) {
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      fail(dims_off, "element count overflows int64");
    }
    n *= d;
  }
  if (ti.ne[0] % tinfo->block_size != 0) {
    fail(dims_off, strfmt("ne[0]=%lld is not a multiple of the block size %lld of type %s",
                          static_cast<long long>(ti.ne[0]),
                          static_cast<long long>(tinfo->block_size), tinfo->name));
  }
  const uint64_t blocks = static_cast<uint64_t>(n / tinfo->block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / tinfo->block_bytes) {
    fail(dims_off, "byte size overflows uint64");
  }
  ti.n_bytes = blocks * tinfo->block_bytes;
  if (ti.offset % f.alignment != 0) {
    fail(offset_off, strfmt("data offset %llu is not a multiple of the alignment %llu",
                            ull(ti.offset), ull(f.alignment)));
  }
  f.tensors.push_back(std::move(ti));
  info_offsets.push_back(info_off);
}

void Parser::check_extents(File& f, const std::vector<uint64_t>& info_offsets) {
  const size_t nt = f.tensors.size();
  for (size_t i = 0; i < nt; ++i) {
    const TensorInfo& t = f.tensors[i];
    ctx_ = "tensor '" + printable(t.name) + "'";
    const uint64_t room = file_size_ - f.data_offset;  // data_offset <= file_size_ checked
    if (t.offset > room || t.n_bytes > room - t.offset) {
      fail(info_offsets[i],
           strfmt("data at data offset %llu + %llu bytes extends past the end of the file "
                  "(data section of %llu bytes starting at %llu)",
                  ull(t.offset), ull(t.n_bytes), ull(room), ull(f.data_offset)));
    }
  }
  // Overlaps: sort by offset and compare each non-empty extent with the furthest end so far.
  std::vector<size_t> order(nt);
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return f.tensors[a].offset < f.tensors[b].offset;
  });
  uint64_t max_end = 0;
  size_t max_end_idx = nt;
  for (size_t i : order) {
    const TensorInfo& t = f.tensors[i];
    if (t.n_bytes == 0) continue;
    if (max_end_idx != nt && t.offset < max_end) {
      ctx_ = "tensor '" + printable(t.name) + "'";
      const TensorInfo& o = f.tensors[max_end_idx];
      fail(info_offsets[i],
           strfmt("data [%llu, %llu) overlaps tensor '%s' [%llu, %llu)", ull(t.offset),
                  ull(t.offset + t.n_bytes), printable(o.name).c_str(), ull(o.offset),
                  ull(o.offset + o.n_bytes)));
    }
    if (t.offset + t.n_bytes > max_end || max_end_idx == nt) {
      max_end = t.offset + t.n_bytes;
      max_end_idx = i;
    }
  }
}

File Parser::run() {
  File f;
  f.file_size = file_size_;
  need(4);
  if (std::memcmp(d_, "GGUF", 4) != 0) {
    fail(0, strfmt("bad magic '%s' (expected 'GGUF')",
                   printable(std::string_view(reinterpret_cast<const char*>(d_), 4)).c_str()));
  }
  pos_ = 4;
  const uint32_t version = rd_u32();
  if (version == 1) fail(4, "version 1 is not supported (only versions 2 and 3)");
  if (version != 2 && version != 3) {
    fail(4, strfmt("unsupported version %u (only versions 2 and 3)", version));
  }
  f.version = version;
  const uint64_t nt_off = pos_;
  const uint64_t n_tensors = rd_u64();
  const uint64_t nkv_off = pos_;
  const uint64_t n_kv = rd_u64();
  // Smallest encodings: tensor info = name length + n_dims + one dim + type + offset;
  // key/value = key length + type + one byte.
  constexpr uint64_t kMinTensorInfo = 8 + 4 + 8 + 4 + 8;
  constexpr uint64_t kMinKv = 8 + 4 + 1;
  if (n_tensors > kMaxTensors) {
    fail(nt_off, strfmt("tensor count %llu exceeds the limit of %llu", ull(n_tensors),
                        ull(kMaxTensors)));
  }
  if (n_tensors > left_in_file() / kMinTensorInfo) {
    fail(nt_off, strfmt("tensor count %llu does not fit in the %llu bytes left", ull(n_tensors),
                        ull(left_in_file())));
  }
  if (n_kv > left_in_file() / kMinKv ||
      n_tensors * kMinTensorInfo > left_in_file() - n_kv * kMinKv) {
    fail(nkv_off, strfmt("key count %llu (with %llu tensors) does not fit in the %llu bytes left",
                         ull(n_kv), ull(n_tensors), ull(left_in_file())));
  }
  add_values(nkv_off, n_kv);

  std::unordered_set<std::string> keys;
  f.kv.reserve(static_cast<size_t>(std::min(n_kv, (size_ - pos_) / kMinKv)));
  for (uint64_t i = 0; i < n_kv; ++i) read_kv(f, i, keys);

  std::unordered_set<std::string> names;
  std::vector<uint64_t> info_offsets;
  f.tensors.reserve(static_cast<size_t>(std::min(n_tensors, (size_ - pos_) / kMinTensorInfo)));
  for (uint64_t i = 0; i < n_tensors; ++i) read_tensor_info(f, i, names, info_offsets);

  // The data section starts at the next multiple of the alignment (alignment <= 2^31).
  ctx_ = "data section";
  f.data_offset = (pos_ + f.alignment - 1) / f.alignment * f.alignment;
  if (n_tensors > 0 && f.data_offset > file_size_) {
    fail(pos_, strfmt("starts at %llu, past the end of the file (%llu bytes)",
                      ull(f.data_offset), ull(file_size_)));
  }
  check_extents(f, info_offsets);
  return f;
}

File parse_or_need_more(const uint8_t* data, size_t size, uint64_t file_size,
                        std::string_view what) {
  if (size > file_size) {
    throw Error(strfmt("%.*s: buffer of %zu bytes is larger than the file size %llu",
                       static_cast<int>(what.size()), what.data(), size, ull(file_size)));
  }
  return Parser(data, size, file_size, what).run();
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
 private:
  int fd_;
};

}  // namespace

File parse(const uint8_t* data, size_t size, uint64_t file_size, std::string_view what) {
  try {
    return parse_or_need_more(data, size, file_size, what);
  } catch (const NeedMore& nm) {
    throw Error(strfmt("%.*s: header at offset %zu: truncated buffer: the header needs at "
                       "least %llu bytes of the %llu-byte file, only %zu given",
                       static_cast<int>(what.size()), what.data(), size, ull(nm.end),
                       ull(file_size), size));
  }
}

File read_file(const std::string& path) {
  const std::string what = "gguf '" + path + "'";
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    throw Error(strfmt("gguf: cannot open '%s': %s", path.c_str(), errno_text(errno).c_str()));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    throw Error(strfmt("gguf: cannot stat '%s': %s", path.c_str(), errno_text(errno).c_str()));
  }
  if (!S_ISREG(st.st_mode)) throw Error(strfmt("gguf: '%s' is not a regular file", path.c_str()));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  std::vector<uint8_t> buf;
  uint64_t want = std::min<uint64_t>(file_size, uint64_t(1) << 20);
  for (;;) {
    // Extend buf to `want` bytes.
    const size_t have = buf.size();
    buf.resize(static_cast<size_t>(want));
    size_t got = have;
    while (got < buf.size()) {
      const ssize_t r = ::pread(fd.get(), buf.data() + got, buf.size() - got,
                                static_cast<off_t>(got));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw Error(strfmt("gguf: reading '%s' at offset %zu: %s", path.c_str(), got,
                           errno_text(errno).c_str()));
      }
      if (r == 0) {
        throw Error(strfmt("gguf: reading '%s': unexpected end of file at offset %zu "
                           "(the file shrank while being read)", path.c_str(), got));
      }
      got += static_cast<size_t>(r);
    }
    try {
      return parse_or_need_more(buf.data(), buf.size(), file_size, what);
    } catch (const NeedMore& nm) {
      // nm.end > buf.size() and nm.end <= file_size, so this always makes progress.
      want = std::min<uint64_t>(file_size, std::max<uint64_t>(nm.end, 2 * uint64_t(buf.size())));
    }
  }
}

}  // namespace les::gguf
