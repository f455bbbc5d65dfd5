// GGUF writer: validates what is added, serializes the header, writes the file atomically.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <system_error>

#include "les/gguf/gguf.h"
#include "les/util/error.h"

namespace les::gguf {
namespace {

using ull = unsigned long long;

constexpr uint64_t kChunk = uint64_t(4) << 20;  // write granularity (progress reports)

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool valid_alignment(uint64_t a) {
  return a != 0 && (a & (a - 1)) == 0 && a <= (uint64_t(1) << 31);
}

// Throws if v (or any element) is not representable in its declared type.
void validate_value(const std::string& key, const Value& v, int depth) {
  auto bad = [&](const std::string& msg) {
    throw Error(strfmt("gguf writer: key '%s': %s", key.c_str(), msg.c_str()));
  };
  auto urange = [&](uint64_t max) {
    if (v.u64 > max) {
      bad(strfmt("value %llu out of range for %s", ull(v.u64), value_type_name(v.type)));
    }
  };
  auto irange = [&](int64_t lo, int64_t hi) {
    if (v.i64 < lo || v.i64 > hi) {
      bad(strfmt("value %lld out of range for %s", static_cast<long long>(v.i64),
                 value_type_name(v.type)));
    }
  };
  switch (v.type) {
    case ValueType::UINT8: urange(0xff); return;
    case ValueType::UINT16: urange(0xffff); return;
    case ValueType::UINT32: urange(0xffffffffu); return;
    case ValueType::UINT64: return;
    case ValueType::BOOL: urange(1); return;
    case ValueType::INT8: irange(-128, 127); return;
    case ValueType::INT16: irange(-32768, 32767); return;
    case ValueType::INT32:
      irange(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      return;
    case ValueType::INT64: return;
    case ValueType::FLOAT32: case ValueType::FLOAT64: return;
    case ValueType::STRING:
      if (v.str.size() > kMaxStringBytes) bad("string longer than 1 GiB");
      return;
    case ValueType::ARRAY:
      if (depth >= kMaxArrayDepth) bad(strfmt("arrays nested deeper than %d levels", kMaxArrayDepth));
      if (static_cast<uint32_t>(v.elem_type) > static_cast<uint32_t>(ValueType::FLOAT64)) {
        bad(strfmt("unknown array element type %u", static_cast<uint32_t>(v.elem_type)));
      }
      for (size_t i = 0; i < v.arr.size(); ++i) {
        if (v.arr[i].type != v.elem_type) {
          bad(strfmt("array element %zu has type %s, the array holds %s", i,
                     value_type_name(v.arr[i].type), value_type_name(v.elem_type)));
        }
        validate_value(key, v.arr[i], depth + 1);
      }
      return;
  }
  bad(strfmt("unknown value type %u", static_cast<uint32_t>(v.type)));
}

void put_le(std::string& out, uint64_t v, unsigned n) {
  for (unsigned i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_string(std::string& out, const std::string& s) {
  put_le(out, s.size(), 8);
  out += s;
}

// Serializes a validated value (without its type tag).
void put_value(std::string& out, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8: case ValueType::BOOL: put_le(out, v.u64, 1); break;
    case ValueType::UINT16: put_le(out, v.u64, 2); break;
    case ValueType::UINT32: put_le(out, v.u64, 4); break;
    case ValueType::UINT64: put_le(out, v.u64, 8); break;
    case ValueType::INT8: put_le(out, static_cast<uint64_t>(v.i64), 1); break;
    case ValueType::INT16: put_le(out, static_cast<uint64_t>(v.i64), 2); break;
    case ValueType::INT32: put_le(out, static_cast<uint64_t>(v.i64), 4); break;
    case ValueType::INT64: put_le(out, static_cast<uint64_t>(v.i64), 8); break;
    case ValueType::FLOAT32: {
      const float f = static_cast<float>(v.f64);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      put_le(out, bits, 4);
      break;
    }
    case ValueType::FLOAT64: {
      uint64_t bits;
      std::memcpy(&bits, &v.f64, sizeof bits);
      put_le(out, bits, 8);
      break;
    }
    case ValueType::STRING: put_string(out, v.str); break;
    case ValueType::ARRAY:
      put_le(out, static_cast<uint32_t>(v.elem_type), 4);
      put_le(out, v.arr.size(), 8);
      for (const Value& e : v.arr) put_value(out, e);
      break;
  }
}

Value scalar_u(ValueType t, uint64_t x) {
  Value v;
  v.type = t;
  v.u64 = x;
  return v;
}

Value scalar_i(ValueType t, int64_t x) {
  Value v;
  v.type = t;
  v.i64 = x;
  return v;
}

Value scalar_f(float x) {
  Value v;
  v.type = ValueType::FLOAT32;
  v.f64 = x;
  return v;
}

Value array_of(ValueType elem) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  return v;
}

// Writes all of [p, p+n) to fd, retrying short writes and EINTR.
void write_all(int fd, const void* p, uint64_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, uint64_t(1) << 30));
    const ssize_t r = ::write(fd, c, want);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(strfmt("gguf writer: writing '%s': %s", path.c_str(), errno_text(errno).c_str()));
    }
    if (r == 0) throw Error(strfmt("gguf writer: writing '%s': no progress", path.c_str()));
    c += r;
    n -= static_cast<uint64_t>(r);
  }
}

// A temporary file next to the target; removed on destruction unless committed.
class TempFile {
 public:
  explicit TempFile(const std::string& path) : path_(path) {
    std::random_device rd;
    for (int attempt = 0;; ++attempt) {
      tmp_ = strfmt("%s.tmp.%ld.%08x", path.c_str(), static_cast<long>(::getpid()), rd());
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) return;
      if (errno != EEXIST || attempt >= 16) {
        throw Error(strfmt("gguf writer: cannot create a temporary file for '%s' (%s): %s",
                           path.c_str(), tmp_.c_str(), errno_text(errno).c_str()));
      }
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  // fsync, close, rename over the target, then (best effort) fsync the directory.
  void commit() {
    if (::fsync(fd_) != 0) fail("fsync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("close");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename");
    committed_ = true;
    const size_t slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);  // durability of the rename; the file itself is complete either way
      ::close(dfd);
    }
  }
 private:
  [[noreturn]] void fail(const char* op) {
    throw Error(strfmt("gguf writer: %s of '%s' (temporary '%s') failed: %s", op, path_.c_str(),
                       tmp_.c_str(), errno_text(errno).c_str()));
  }
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void Writer::set_alignment(uint64_t a) {
  if (!valid_alignment(a)) {
    throw Error(strfmt("gguf writer: alignment %llu is not a power of two in 1..2^31", ull(a)));
  }
  alignment_ = a;
  for (auto& [k, v] : kv_) {
    if (k == "general.alignment") v.u64 = a;
  }
}

void Writer::add(std::string key, Value v) {
  if (key.size() > kMaxStringBytes) throw Error("gguf writer: key longer than 1 GiB");
  for (const auto& kv : kv_) {
    if (kv.first == key) throw Error(strfmt("gguf writer: duplicate key '%s'", key.c_str()));
  }
  validate_value(key, v, 0);
  if (kv_.size() >= kMaxValues) throw Error("gguf writer: too many keys");
  if (key == "general.alignment") {
    if (v.type != ValueType::UINT32) {
      throw Error(strfmt("gguf writer: key 'general.alignment' must be uint32, not %s",
                         value_type_name(v.type)));
    }
    set_alignment(v.u64);
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void Writer::add_u32(std::string key, uint32_t v) {
  add(std::move(key), scalar_u(ValueType::UINT32, v));
}
void Writer::add_i32(std::string key, int32_t v) {
  add(std::move(key), scalar_i(ValueType::INT32, v));
}
void Writer::add_u64(std::string key, uint64_t v) {
  add(std::move(key), scalar_u(ValueType::UINT64, v));
}
void Writer::add_f32(std::string key, float v) { add(std::move(key), scalar_f(v)); }
void Writer::add_bool(std::string key, bool v) {
  add(std::move(key), scalar_u(ValueType::BOOL, v ? 1 : 0));
}

void Writer::add_string(std::string key, std::string v) {
  Value val;
  val.type = ValueType::STRING;
  val.str = std::move(v);
  add(std::move(key), std::move(val));
}

void Writer::add_string_array(std::string key, const std::vector<std::string>& v) {
  Value a = array_of(ValueType::STRING);
  a.arr.reserve(v.size());
  for (const std::string& s : v) {
    Value e;
    e.type = ValueType::STRING;
    e.str = s;
    a.arr.push_back(std::move(e));
  }
  add(std::move(key), std::move(a));
}

void Writer::add_i32_array(std::string key, const std::vector<int32_t>& v) {
  Value a = array_of(ValueType::INT32);
  a.arr.reserve(v.size());
  for (int32_t x : v) a.arr.push_back(scalar_i(ValueType::INT32, x));
  add(std::move(key), std::move(a));
}

void Writer::add_f32_array(std::string key, const std::vector<float>& v) {
  Value a = array_of(ValueType::FLOAT32);
  a.arr.reserve(v.size());
  for (float x : v) a.arr.push_back(scalar_f(x));
  add(std::move(key), std::move(a));
}

void Writer::add_tensor(std::string name, std::vector<int64_t> ne, Type type, const void* data) {
  PendingTensor& t = declare(std::move(name), std::move(ne), type);
  if (data == nullptr && t.n_bytes > 0) {
    const std::string n = t.name;
    tensor_names_.erase(n);
    tensors_.pop_back();
    throw Error(strfmt("gguf writer: tensor '%s': null data", n.c_str()));
  }
  t.data = data;
}

void Writer::add_tensor(std::string name, std::vector<int64_t> ne, Type type, FillFn fill) {
  if (!fill) throw Error(strfmt("gguf writer: tensor '%s': no fill function", name.c_str()));
  PendingTensor& t = declare(std::move(name), std::move(ne), type);
  t.fill = [fill = std::move(fill)](void* dst, uint64_t, uint64_t n) { fill(dst, n); };
  t.unit = std::max<uint64_t>(t.n_bytes, 1);  // one piece: the whole tensor
}

void Writer::add_tensor(std::string name, std::vector<int64_t> ne, Type type, ChunkFillFn fill, uint64_t unit) {
  if (!fill || unit == 0) throw Error(strfmt("gguf writer: tensor '%s': no fill function or a zero unit", name.c_str()));
  PendingTensor& t = declare(std::move(name), std::move(ne), type);
  t.fill = std::move(fill);
  t.unit = unit;
}

Writer::PendingTensor& Writer::declare(std::string name, std::vector<int64_t> ne, Type type) {
  auto bad = [&](const std::string& msg) {
    throw Error(strfmt("gguf writer: tensor '%s': %s", name.c_str(), msg.c_str()));
  };
  if (name.size() > kMaxStringBytes) bad("name longer than 1 GiB");
  if (tensors_.size() >= kMaxTensors) bad("too many tensors");
  if (tensor_names_.count(name)) bad("duplicate tensor name");
  const std::optional<TypeInfo> ti = type_info(static_cast<uint32_t>(type));
  if (!ti) bad(strfmt("unknown type id %u", static_cast<uint32_t>(type)));
  if (ne.empty() || ne.size() > kMaxDims) bad(strfmt("n_dims %zu out of range 1..4", ne.size()));
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d < 0) bad(strfmt("negative dimension %lld", static_cast<long long>(d)));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) bad("element count overflows");
    n *= d;
  }
  if (ne[0] % ti->block_size != 0) {
    bad(strfmt("ne[0]=%lld is not a multiple of the block size %lld of %s",
               static_cast<long long>(ne[0]), static_cast<long long>(ti->block_size), ti->name));
  }
  const uint64_t blocks = static_cast<uint64_t>(n / ti->block_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / 2 / ti->block_bytes) bad("too large");
  const uint64_t n_bytes = blocks * ti->block_bytes;
  tensor_names_.insert(name);
  tensors_.push_back(PendingTensor{std::move(name), std::move(ne), type, nullptr, {}, 1, n_bytes});
  return tensors_.back();
}

std::string Writer::header_blob(uint64_t* data_bytes) const {
  bool has_alignment_key = false;
  for (const auto& kv : kv_) has_alignment_key |= kv.first == "general.alignment";
  const bool emit_alignment = !has_alignment_key && alignment_ != kDefaultAlignment;

  std::string out;
  out += "GGUF";
  put_le(out, 3, 4);
  put_le(out, tensors_.size(), 8);
  put_le(out, kv_.size() + (emit_alignment ? 1 : 0), 8);
  for (const auto& [k, v] : kv_) {
    put_string(out, k);
    put_le(out, static_cast<uint32_t>(v.type), 4);
    put_value(out, v);
  }
  if (emit_alignment) {
    put_string(out, "general.alignment");
    put_le(out, static_cast<uint32_t>(ValueType::UINT32), 4);
    put_le(out, alignment_, 4);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    put_string(out, t.name);
    put_le(out, t.ne.size(), 4);
    for (int64_t d : t.ne) put_le(out, static_cast<uint64_t>(d), 8);
    put_le(out, static_cast<uint32_t>(t.type), 4);
    put_le(out, offset, 8);
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, t.n_bytes, &end) || end > (uint64_t(1) << 62)) {
      throw Error(strfmt("gguf writer: tensor '%s': data section too large", t.name.c_str()));
    }
    offset = align_up(end, alignment_);  // no overflow: end <= 2^62, alignment <= 2^31
  }
  out.resize(static_cast<size_t>(align_up(out.size(), alignment_)), '\0');
  if (data_bytes) *data_bytes = offset;
  return out;
}

uint64_t Writer::header_bytes() const { return header_blob(nullptr).size(); }

void Writer::write(const std::string& path,
                   const std::function<void(uint64_t, uint64_t)>& progress) const {
  uint64_t data_bytes = 0;
  const std::string header = header_blob(&data_bytes);
  const uint64_t total = header.size() + data_bytes;
  uint64_t done = 0;
  auto report = [&] {
    if (progress) progress(done, total);
  };

  TempFile tmp(path);  // removed again if anything below throws
  write_all(tmp.fd(), header.data(), header.size(), path);
  done += header.size();
  report();
  const std::string zeros(static_cast<size_t>(std::min<uint64_t>(alignment_, kChunk)), '\0');
  std::vector<uint8_t> buf;
  for (const PendingTensor& t : tensors_) {
    if (t.fill) {
      const uint64_t piece = t.unit * std::max<uint64_t>(1, fill_piece_ / t.unit);
      for (uint64_t o = 0; o < t.n_bytes; o += piece) {
        const uint64_t n = std::min(piece, t.n_bytes - o);
        buf.assign(static_cast<size_t>(n), 0);
        t.fill(buf.data(), o, n);
        for (uint64_t w = 0; w < n; w += kChunk) {
          const uint64_t m = std::min(kChunk, n - w);
          write_all(tmp.fd(), buf.data() + w, m, path);
          done += m;
          report();
        }
      }
    } else {
      const uint8_t* src = static_cast<const uint8_t*>(t.data);
      for (uint64_t o = 0; o < t.n_bytes; o += kChunk) {
        const uint64_t n = std::min(kChunk, t.n_bytes - o);
        write_all(tmp.fd(), src + o, n, path);
        done += n;
        report();
      }
    }
    uint64_t pad = align_up(t.n_bytes, alignment_) - t.n_bytes;
    while (pad > 0) {
      const uint64_t n = std::min<uint64_t>(pad, zeros.size());
      write_all(tmp.fd(), zeros.data(), n, path);
      pad -= n;
      done += n;
    }
  }
  std::vector<uint8_t>().swap(buf);
  tmp.commit();
  report();
}

}  // namespace les::gguf
