// Reading and writing importance matrices in llama.cpp's GGUF form and reading its legacy .dat form.
#include <cmath>
#include <cstring>
#include <limits>

#include "les/imatrix/imatrix.h"
#include "les/util/error.h"
#include "les/util/mapped_file.h"

namespace les {

namespace {

constexpr const char* kKeyType = "general.type";
constexpr const char* kKeyDatasets = "imatrix.datasets";
constexpr const char* kKeyChunkCount = "imatrix.chunk_count";
constexpr const char* kKeyChunkSize = "imatrix.chunk_size";
constexpr const char* kSumsSuffix = ".in_sum2";
constexpr const char* kCountsSuffix = ".counts";
constexpr uint32_t kMaxLegacyName = 4096;

bool remove_suffix(std::string& s, const std::string& suffix) {
  if (s.size() <= suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  s.resize(s.size() - suffix.size());
  return true;
}

std::vector<float> read_f32(const uint8_t* p, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (n > 0) std::memcpy(v.data(), p, static_cast<size_t>(n) * sizeof(float));
  return v;
}

// Counts must be whole, non-negative and finite (llama.cpp rounds them to integers).
void check_counts(const std::string& path, const std::string& name, const std::vector<float>& c) {
  for (size_t i = 0; i < c.size(); ++i) {
    if (!std::isfinite(c[i]) || c[i] < 0) {
      throw Error(strfmt("%s: imatrix entry '%s': count %zu is %g (must be finite and >= 0)", path.c_str(),
                         name.c_str(), i, static_cast<double>(c[i])));
    }
  }
}

void check_sums(const std::string& path, const std::string& name, const std::vector<float>& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!std::isfinite(s[i])) {
      throw Error(strfmt("%s: imatrix entry '%s': value %zu is %g (not finite)", path.c_str(), name.c_str(), i,
                         static_cast<double>(s[i])));
    }
  }
}

ImportanceMatrix read_gguf_form(const std::string& path, const uint8_t* data, size_t size) {
  const gguf::File f = gguf::parse(data, size, size, "imatrix '" + path + "'");
  ImportanceMatrix m;
  const std::string type = f.get_string(kKeyType, "");
  if (!type.empty() && type != "imatrix") {
    throw Error(strfmt("%s: not an importance matrix (general.type is '%s', expected 'imatrix')", path.c_str(),
                       type.c_str()));
  }
  if (const gguf::Value* v = f.find(kKeyDatasets)) {
    if (v->type != gguf::ValueType::ARRAY || v->elem_type != gguf::ValueType::STRING) {
      throw Error(strfmt("%s: key '%s' must be an array of strings", path.c_str(), kKeyDatasets));
    }
    for (const gguf::Value& s : v->arr) m.datasets.push_back(s.str);
  }
  auto small_uint = [&](const char* key) {
    const int64_t v = f.get_int(key, 0);
    if (v < 0 || v > std::numeric_limits<int>::max()) {
      throw Error(strfmt("%s: key '%s' = %lld is out of range", path.c_str(), key, static_cast<long long>(v)));
    }
    return static_cast<int>(v);
  };
  m.chunk_count = small_uint(kKeyChunkCount);
  m.chunk_size = small_uint(kKeyChunkSize);

  // Pair NAME.in_sum2 with NAME.counts; other tensors are ignored (as llama.cpp does).
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  for (const gguf::TensorInfo& t : f.tensors) {
    std::string name = t.name;
    if (remove_suffix(name, kSumsSuffix)) {
      pairs[name].first = &t;
    } else if (remove_suffix(name, kCountsSuffix)) {
      pairs[name].second = &t;
    }
  }
  if (pairs.empty()) {
    throw Error(strfmt("%s: no importance matrix data (no '*%s' / '*%s' tensors among %zu tensors)", path.c_str(),
                       kSumsSuffix, kCountsSuffix, f.tensors.size()));
  }
  for (const auto& [name, st] : pairs) {
    const gguf::TensorInfo* sums = st.first;
    const gguf::TensorInfo* counts = st.second;
    if (!sums || !counts) {
      throw Error(strfmt("%s: imatrix entry '%s' has %s but no %s tensor", path.c_str(), name.c_str(),
                         sums ? kSumsSuffix : kCountsSuffix, sums ? kCountsSuffix : kSumsSuffix));
    }
    for (const gguf::TensorInfo* t : {sums, counts}) {
      if (t->type != Type::F32) {
        throw Error(strfmt("%s: tensor '%s' has type %s, expected F32", path.c_str(), t->name.c_str(),
                           type_name(t->type)));
      }
    }
    const int64_t nval = sums->n_elements(), ncounts = counts->n_elements();
    if (nval < 1 || ncounts < 1) {
      throw Error(strfmt("%s: imatrix entry '%s' is empty (%lld values, %lld counts)", path.c_str(), name.c_str(),
                         static_cast<long long>(nval), static_cast<long long>(ncounts)));
    }
    ImatrixEntry e;
    std::vector<float> c = read_f32(data + f.data_offset + counts->offset, ncounts);
    if (ncounts > 1) {
      if (nval % ncounts != 0) {
        throw Error(strfmt("%s: imatrix entry '%s': %lld values do not divide into %lld matrices", path.c_str(),
                           name.c_str(), static_cast<long long>(nval), static_cast<long long>(ncounts)));
      }
      e.n_mat = ncounts;
      e.n_in = nval / ncounts;
    } else {
      // One count for several rows of sums (an older 3-D entry): every matrix has that count.
      e.n_in = sums->ne[0];
      e.n_mat = nval / e.n_in;
      c.assign(static_cast<size_t>(e.n_mat), c[0]);
    }
    e.in_sum2 = read_f32(data + f.data_offset + sums->offset, nval);
    e.counts = std::move(c);
    check_counts(path, name, e.counts);
    check_sums(path, name, e.in_sum2);
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

// Bounds-checked little-endian reads over the legacy file.
class LegacyReader {
 public:
  LegacyReader(const std::string& path, const uint8_t* d, size_t n) : path_(path), d_(d), n_(n) {}
  size_t left() const { return n_ - pos_; }
  int32_t i32(const char* what) {
    need(4, what);
    int32_t v;
    std::memcpy(&v, d_ + pos_, 4);
    pos_ += 4;
    return v;
  }
  const uint8_t* bytes(size_t k, const char* what) {
    need(k, what);
    const uint8_t* p = d_ + pos_;
    pos_ += k;
    return p;
  }
  // What is being read, for messages: "entry i ('name')", or "" outside the entries.
  void set_context(std::string c) { entry_ctx_ = std::move(c); }

 private:
  void need(size_t k, const char* what) const {
    if (k > left()) {
      throw Error(strfmt("%s: legacy imatrix truncated: %s%s%s needs %zu bytes at offset %zu, the file has %zu",
                         path_.c_str(), entry_ctx_.c_str(), entry_ctx_.empty() ? "" : ": ", what, k, pos_, n_));
    }
  }
  const std::string& path_;
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
  std::string entry_ctx_;
};

ImportanceMatrix read_legacy_form(const std::string& path, const uint8_t* data, size_t size) {
  LegacyReader r(path, data, size);
  ImportanceMatrix m;
  m.legacy = true;
  const int32_t n_entries = r.i32("the entry count");
  // Each entry takes at least 16 bytes: bound the count by the file before looping.
  if (n_entries < 1 || static_cast<uint64_t>(n_entries) > size / 16) {
    throw Error(strfmt("%s: not an importance matrix: neither GGUF nor a legacy imatrix with a plausible entry "
                       "count (%d for %zu bytes)", path.c_str(), n_entries, size));
  }
  for (int32_t i = 0; i < n_entries; ++i) {
    r.set_context(strfmt("entry %d", i));
    const int32_t len = r.i32("the name length");
    if (len < 1 || static_cast<uint32_t>(len) > kMaxLegacyName) {
      throw Error(strfmt("%s: legacy imatrix entry %d: name length %d is outside [1, %u]", path.c_str(), i, len,
                         kMaxLegacyName));
    }
    const uint8_t* np = r.bytes(static_cast<size_t>(len), "the name");
    const std::string name(reinterpret_cast<const char*>(np), static_cast<size_t>(len));
    r.set_context(strfmt("entry %d ('%s')", i, name.c_str()));
    const int32_t ncall = r.i32("the call count");
    const int32_t nval = r.i32("the value count");
    if (nval < 1 || ncall < 0) {
      throw Error(strfmt("%s: legacy imatrix entry %d ('%s'): %d values, %d calls", path.c_str(), i, name.c_str(),
                         nval, ncall));
    }
    const uint8_t* vp = r.bytes(static_cast<size_t>(nval) * sizeof(float), "the values");
    if (m.entries.count(name)) {
      throw Error(strfmt("%s: legacy imatrix: entry '%s' appears twice", path.c_str(), name.c_str()));
    }
    ImatrixEntry e;
    e.n_in = nval;
    e.n_mat = 1;
    e.in_sum2 = read_f32(vp, nval);
    // Values are mean * ncall; llama-quantize divides by ncall, or takes them as they are when it is 0.
    e.counts.assign(1, static_cast<float>(ncall > 0 ? ncall : 1));
    check_sums(path, name, e.in_sum2);
    m.entries.emplace(name, std::move(e));
  }
  r.set_context("");
  // Optional trailer: chunk count, then the dataset name.
  if (r.left() >= 4) {
    const int32_t n_chunks = r.i32("the chunk count");
    m.chunk_count = n_chunks > 0 ? n_chunks : 0;
    if (r.left() >= 4) {
      const int32_t len = r.i32("the dataset name length");
      if (len > 0) {
        const uint8_t* p = r.bytes(static_cast<size_t>(len), "the dataset name");
        m.datasets.emplace_back(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
      }
    }
  }
  if (r.left() != 0) {
    throw Error(strfmt("%s: legacy imatrix: %zu unexpected bytes after the data", path.c_str(), r.left()));
  }
  return m;
}

}  // namespace

const float* ImportanceMatrix::column_weights(const std::string& name, int expert, std::vector<float>& scratch) const {
  const auto it = entries.find(name);
  if (it == entries.end()) return nullptr;
  const ImatrixEntry& e = it->second;
  if (e.n_mat == 1 && expert > 0) {
    throw Error(strfmt("imatrix entry '%s' holds one matrix (a flat expert stack?): call fit_imatrix_to_model() "
                       "before asking for expert %d", name.c_str(), expert));
  }
  if (expert < 0 || expert >= e.n_mat) return nullptr;
  const float c = e.counts[static_cast<size_t>(expert)];
  if (!(c > 0)) return nullptr;
  scratch.resize(static_cast<size_t>(e.n_in));
  const float* s = e.in_sum2.data() + static_cast<size_t>(expert) * static_cast<size_t>(e.n_in);
  for (int64_t j = 0; j < e.n_in; ++j) scratch[static_cast<size_t>(j)] = s[j] / c;
  return scratch.data();
}

ImportanceMatrix parse_imatrix(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 4) throw Error(strfmt("%s: not an importance matrix: %zu bytes", what.c_str(), size));
  if (std::memcmp(data, "GGUF", 4) == 0) return read_gguf_form(what, data, size);
  return read_legacy_form(what, data, size);
}

ImportanceMatrix read_imatrix(const std::string& path) {
  const MappedFile file = MappedFile::open(path);
  return parse_imatrix(file.data(), file.size(), path);
}

void write_imatrix(const ImportanceMatrix& m, const std::string& path) {
  gguf::Writer w;
  w.add_string(kKeyType, "imatrix");
  w.add_string_array(kKeyDatasets, m.datasets);
  if (m.chunk_count < 0 || m.chunk_size < 0) {
    throw Error(strfmt("imatrix for %s: chunk count %d and size %d must be >= 0", path.c_str(), m.chunk_count,
                       m.chunk_size));
  }
  w.add_u32(kKeyChunkCount, static_cast<uint32_t>(m.chunk_count));
  w.add_u32(kKeyChunkSize, static_cast<uint32_t>(m.chunk_size));
  for (const auto& [name, e] : m.entries) {
    if (e.n_in < 1 || e.n_mat < 1 || e.in_sum2.size() != static_cast<size_t>(e.n_in * e.n_mat) ||
        e.counts.size() != static_cast<size_t>(e.n_mat)) {
      throw Error(strfmt("imatrix entry '%s': %zu values and %zu counts for %lld x %lld", name.c_str(),
                         e.in_sum2.size(), e.counts.size(), static_cast<long long>(e.n_mat),
                         static_cast<long long>(e.n_in)));
    }
    // Trailing dimensions of 1 are dropped, as ggml writes them.
    std::vector<int64_t> sums_ne{e.n_in}, counts_ne{1};
    if (e.n_mat > 1) {
      sums_ne.push_back(e.n_mat);
      counts_ne.push_back(e.n_mat);
    }
    w.add_tensor(name + kSumsSuffix, sums_ne, Type::F32, static_cast<const void*>(e.in_sum2.data()));
    w.add_tensor(name + kCountsSuffix, counts_ne, Type::F32, static_cast<const void*>(e.counts.data()));
  }
  w.write(path);
}

}  // namespace les
