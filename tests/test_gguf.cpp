// Tests of the GGUF reader/writer and the type table: round trips, the trained model, hand-made
// corrupt files (each checked for the words of its error) and a seeded mutation loop.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/quant/blocks.h"
#include "les/quant/types.h"
#include "les/util/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using les::Type;
using les::gguf::File;
using les::gguf::Value;
using les::gguf::ValueType;
using les::gguf::Writer;

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

// A fresh directory, removed with its contents at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::path(::testing::TempDir()) / "les_gguf_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  size_t n_entries() const {
    size_t n = 0;
    for (auto it = fs::directory_iterator(path); it != fs::directory_iterator(); ++it) ++n;
    return n;
  }
};

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

File parse_vec(const std::vector<uint8_t>& b) {
  return les::gguf::parse(b.data(), b.size(), b.size());
}

// Parses b and expects a les::Error whose message contains every word.
void expect_error(const std::vector<uint8_t>& b, std::initializer_list<const char*> words) {
  try {
    parse_vec(b);
    ADD_FAILURE() << "parse succeeded, expected an error containing '" << *words.begin() << "'";
  } catch (const les::Error& e) {
    const std::string msg = e.what();
    for (const char* w : words) {
      EXPECT_NE(msg.find(w), std::string::npos) << "message: " << msg << "\nmissing: " << w;
    }
  }
}

Value vu(ValueType t, uint64_t x) { Value v; v.type = t; v.u64 = x; return v; }
Value vi(ValueType t, int64_t x) { Value v; v.type = t; v.i64 = x; return v; }
Value vf(ValueType t, double x) { Value v; v.type = t; v.f64 = x; return v; }
Value vs(std::string s) { Value v; v.type = ValueType::STRING; v.str = std::move(s); return v; }
Value varr(ValueType elem, std::vector<Value> a) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  v.arr = std::move(a);
  return v;
}

// Deep equality on the fields that are meaningful for each type.
bool same_value(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case ValueType::UINT8: case ValueType::UINT16: case ValueType::UINT32:
    case ValueType::UINT64: case ValueType::BOOL:
      return a.u64 == b.u64;
    case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
      return a.i64 == b.i64;
    case ValueType::FLOAT32: case ValueType::FLOAT64:
      return std::memcmp(&a.f64, &b.f64, sizeof(double)) == 0;
    case ValueType::STRING:
      return a.str == b.str;
    case ValueType::ARRAY:
      if (a.elem_type != b.elem_type || a.arr.size() != b.arr.size()) return false;
      for (size_t i = 0; i < a.arr.size(); ++i) {
        if (!same_value(a.arr[i], b.arr[i])) return false;
      }
      return true;
  }
  return false;
}

// Raw little-endian byte builder, independent of the Writer, for crafting (corrupt) files.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes& u8(uint64_t v) { return le(v, 1); }
  Bytes& u32(uint64_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& raw(const std::string& s) { b.insert(b.end(), s.begin(), s.end()); return *this; }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s); }
  size_t size() const { return b.size(); }
};

Bytes kv_u32(const std::string& key, uint64_t v) { Bytes k; k.str(key).u32(4).u32(v); return k; }
Bytes kv_str(const std::string& key, const std::string& v) {
  Bytes k;
  k.str(key).u32(8).str(v);
  return k;
}

struct RawTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};

// A GGUF file laid out by hand. Counts default to the real ones.
struct RawFile {
  std::string magic = "GGUF";
  uint32_t version = 3;
  int64_t n_tensors = -1;  // -1: tensors.size()
  int64_t n_kv = -1;       // -1: kvs.size()
  std::vector<Bytes> kvs;
  std::vector<RawTensor> tensors;
  uint64_t alignment = 32;  // used for padding only
  uint64_t data_bytes = 0;  // bytes of data section
};

struct Built {
  std::vector<uint8_t> bytes;
  uint64_t data_offset = 0;
  std::vector<size_t> boundaries;         // offset after each structural field
  std::vector<size_t> kv_offsets;         // where each key starts
  std::vector<size_t> tensor_offsets;     // where each tensor info starts
  std::vector<size_t> tensor_type_offsets;
};

Built build(const RawFile& f) {
  Built out;
  Bytes b;
  b.raw(f.magic);
  out.boundaries.push_back(b.size());
  b.u32(f.version);
  out.boundaries.push_back(b.size());
  b.u64(f.n_tensors < 0 ? f.tensors.size() : uint64_t(f.n_tensors));
  out.boundaries.push_back(b.size());
  b.u64(f.n_kv < 0 ? f.kvs.size() : uint64_t(f.n_kv));
  out.boundaries.push_back(b.size());
  for (const Bytes& kv : f.kvs) {
    out.kv_offsets.push_back(b.size());
    b.b.insert(b.b.end(), kv.b.begin(), kv.b.end());
    out.boundaries.push_back(b.size());
  }
  for (const RawTensor& t : f.tensors) {
    out.tensor_offsets.push_back(b.size());
    b.str(t.name);
    out.boundaries.push_back(b.size());
    b.u32(t.ne.size());
    out.boundaries.push_back(b.size());
    for (uint64_t d : t.ne) b.u64(d);
    out.boundaries.push_back(b.size());
    out.tensor_type_offsets.push_back(b.size());
    b.u32(t.type);
    out.boundaries.push_back(b.size());
    b.u64(t.offset);
    out.boundaries.push_back(b.size());
  }
  while (b.size() % f.alignment) b.u8(0);
  out.data_offset = b.size();
  for (uint64_t i = 0; i < f.data_bytes; ++i) b.u8(static_cast<uint8_t>(i * 7 + 1));
  out.bytes = std::move(b.b);
  return out;
}

// A small valid file: 4 keys (one an alignment key, two arrays) and 2 tensors whose data end
// exactly at the end of the file (so that every truncation is an error).
RawFile small_file() {
  RawFile f;
  f.kvs.push_back(kv_str("general.architecture", "tiny"));
  f.kvs.push_back(kv_u32("general.alignment", 32));
  Bytes toks;
  toks.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(3).str("a").str("").str("bc");
  f.kvs.push_back(toks);
  Bytes nums;
  nums.str("nums").u32(9).u32(5).u64(2).u32(7).u32(uint32_t(-3));
  f.kvs.push_back(nums);
  f.tensors.push_back({"a", {8}, 0, 0});          // f32, 32 bytes
  f.tensors.push_back({"b", {32, 2}, 8, 32});     // q8_0, 2 blocks = 68 bytes
  f.data_bytes = 32 + 68;
  return f;
}

// ---------------------------------------------------------------------------------------------
// Type table

TEST(GgufTypes, TableMatchesBlockLayouts) {
  struct Want { uint32_t id; const char* name; int64_t bs; size_t bytes; };
  const Want want[] = {
      {0, "f32", 1, 4}, {1, "f16", 1, 2}, {2, "q4_0", 32, 18}, {3, "q4_1", 32, 20},
      {6, "q5_0", 32, 22}, {7, "q5_1", 32, 24}, {8, "q8_0", 32, 34}, {9, "q8_1", 32, 36},
      {10, "q2_K", 256, 84}, {11, "q3_K", 256, 110}, {12, "q4_K", 256, 144},
      {13, "q5_K", 256, 176}, {14, "q6_K", 256, 210}, {15, "q8_K", 256, 292},
      {20, "iq4_nl", 32, 18}, {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1}, {25, "i16", 1, 2}, {26, "i32", 1, 4}, {30, "bf16", 1, 2},
      // The low-bit types (sizes from llama.cpp's gguf-py GGML_QUANT_SIZES).
      {16, "iq2_xxs", 256, 66}, {17, "iq2_xs", 256, 74}, {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},
      {21, "iq3_s", 256, 110}, {22, "iq2_s", 256, 82}, {29, "iq1_m", 256, 56}, {34, "tq1_0", 256, 54},
      {35, "tq2_0", 256, 66}, {39, "mxfp4", 32, 17}, {40, "nvfp4", 64, 36},
  };
  for (const Want& w : want) {
    auto ti = les::type_info(w.id);
    ASSERT_TRUE(ti.has_value()) << w.name;
    EXPECT_STREQ(ti->name, w.name);
    EXPECT_EQ(ti->block_size, w.bs) << w.name;
    EXPECT_EQ(ti->block_bytes, w.bytes) << w.name;
    EXPECT_STREQ(les::type_name(static_cast<Type>(w.id)), w.name);
    EXPECT_EQ(les::block_size(static_cast<Type>(w.id)), w.bs);
    auto parsed = les::parse_type(w.name);
    ASSERT_TRUE(parsed.has_value()) << w.name;
    EXPECT_EQ(static_cast<uint32_t>(*parsed), w.id);
  }
  for (uint32_t id : {4u, 5u, 27u, 28u, 31u, 32u, 33u, 36u, 37u, 38u, 41u, 42u, 47u, 48u, 99u, 0xffffffffu}) {
    EXPECT_FALSE(les::type_info(id).has_value()) << id;
  }
  EXPECT_EQ(les::parse_type("Q4_K"), Type::Q4_K);
  EXPECT_EQ(les::parse_type("q4_k"), Type::Q4_K);
  EXPECT_EQ(les::parse_type("F16"), Type::F16);
  EXPECT_FALSE(les::parse_type("q4").has_value());
  EXPECT_FALSE(les::parse_type("").has_value());
  EXPECT_EQ(les::row_bytes(Type::Q4_K, 512), 288u);
  EXPECT_EQ(les::row_bytes(Type::F16, 3), 6u);
  EXPECT_EQ(les::row_bytes(Type::Q8_0, 0), 0u);
  EXPECT_TRUE(les::info(Type::Q4_K).weight_type);
  EXPECT_FALSE(les::info(Type::Q8_K).weight_type);
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(GgufRoundTrip, EveryValueType) {
  const std::vector<std::pair<std::string, Value>> values = {
      {"u8", vu(ValueType::UINT8, 255)},
      {"i8", vi(ValueType::INT8, -128)},
      {"u16", vu(ValueType::UINT16, 65535)},
      {"i16", vi(ValueType::INT16, -32768)},
      {"u32", vu(ValueType::UINT32, 0xffffffffu)},
      {"i32", vi(ValueType::INT32, std::numeric_limits<int32_t>::min())},
      {"f32", vf(ValueType::FLOAT32, -1.5e-7f)},
      {"bool_t", vu(ValueType::BOOL, 1)},
      {"bool_f", vu(ValueType::BOOL, 0)},
      {"str", vs("hello, \xe4\xb8\x96\xe7\x95\x8c")},
      {"str_empty", vs("")},
      {"str_nul", vs(std::string("a\0b", 3))},
      {"u64", vu(ValueType::UINT64, std::numeric_limits<uint64_t>::max())},
      {"i64", vi(ValueType::INT64, std::numeric_limits<int64_t>::min())},
      {"f64", vf(ValueType::FLOAT64, 3.141592653589793)},
      {"arr_empty_u8", varr(ValueType::UINT8, {})},
      {"arr_empty_str", varr(ValueType::STRING, {})},
      {"arr_u16", varr(ValueType::UINT16, {vu(ValueType::UINT16, 1), vu(ValueType::UINT16, 2)})},
      {"arr_i64", varr(ValueType::INT64, {vi(ValueType::INT64, -1), vi(ValueType::INT64, 5)})},
      {"arr_f64", varr(ValueType::FLOAT64, {vf(ValueType::FLOAT64, 0.25)})},
      {"arr_bool", varr(ValueType::BOOL, {vu(ValueType::BOOL, 1), vu(ValueType::BOOL, 0)})},
      {"arr_str", varr(ValueType::STRING, {vs("x"), vs(""), vs("yz")})},
      {"arr_nested",
       varr(ValueType::ARRAY,
            {varr(ValueType::INT32, {vi(ValueType::INT32, 1), vi(ValueType::INT32, -2)}),
             varr(ValueType::INT32, {}),
             varr(ValueType::STRING, {vs("deep")}),
             varr(ValueType::ARRAY, {varr(ValueType::FLOAT32, {vf(ValueType::FLOAT32, 2.0)})})})},
  };
  TempDir dir;
  Writer w;
  for (const auto& [k, v] : values) w.add(k, v);
  w.add_u32("h.u32", 7);
  w.add_i32("h.i32", -7);
  w.add_u64("h.u64", uint64_t(1) << 40);
  w.add_f32("h.f32", 0.5f);
  w.add_bool("h.bool", true);
  w.add_string("h.str", "s");
  w.add_string_array("h.strs", {"a", "", "c"});
  w.add_i32_array("h.i32s", {1, -2, 3});
  w.add_f32_array("h.f32s", {});
  const std::string path = dir.file("values.gguf");
  w.write(path);

  const File f = les::gguf::read_file(path);
  EXPECT_EQ(f.version, 3u);
  EXPECT_TRUE(f.tensors.empty());
  ASSERT_EQ(f.kv.size(), values.size() + 9);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(f.kv[i].first, values[i].first);
    EXPECT_TRUE(same_value(f.kv[i].second, values[i].second)) << values[i].first;
  }
  EXPECT_EQ(f.get("h.u32").type, ValueType::UINT32);
  EXPECT_EQ(f.get_int("h.u32"), 7);
  EXPECT_EQ(f.get_int("h.i32"), -7);
  EXPECT_EQ(f.get("h.u64").as_uint("h.u64"), uint64_t(1) << 40);
  EXPECT_EQ(f.get_float("h.f32"), 0.5);
  EXPECT_TRUE(f.get_bool("h.bool", false));
  EXPECT_EQ(f.get_string("h.str"), "s");
  const Value& strs = f.get("h.strs");
  ASSERT_EQ(strs.arr.size(), 3u);
  EXPECT_EQ(strs.arr[1].str, "");
  EXPECT_EQ(strs.arr[2].as_string("h.strs"), "c");
  const Value& i32s = f.get("h.i32s");
  ASSERT_EQ(i32s.arr.size(), 3u);
  EXPECT_EQ(i32s.arr[1].as_int("h.i32s"), -2);
  EXPECT_EQ(f.get("h.f32s").elem_type, ValueType::FLOAT32);
  EXPECT_TRUE(f.get("h.f32s").arr.empty());

  // Parsing the same bytes from memory gives the same result.
  const std::vector<uint8_t> bytes = read_bytes(path);
  const File g = parse_vec(bytes);
  ASSERT_EQ(g.kv.size(), f.kv.size());
  for (size_t i = 0; i < f.kv.size(); ++i) EXPECT_TRUE(same_value(g.kv[i].second, f.kv[i].second));
  EXPECT_EQ(bytes.size() % 32, 0u);
  EXPECT_EQ(w.header_bytes(), bytes.size());
}

TEST(GgufRoundTrip, TensorsOfSeveralTypesByteEqual) {
  struct T { std::string name; std::vector<int64_t> ne; Type type; };
  const std::vector<T> specs = {
      {"f32", {7}, Type::F32},           {"f16", {3, 5}, Type::F16},
      {"bf16", {2, 2, 2}, Type::BF16},   {"q4_0", {64, 3}, Type::Q4_0},
      {"q8_0", {32, 1, 2, 2}, Type::Q8_0}, {"q4_K", {256, 2}, Type::Q4_K},
      {"q6_K", {512}, Type::Q6_K},       {"q3_K", {256, 3, 2}, Type::Q3_K},
      {"i32", {5}, Type::I32},           {"empty", {0, 4}, Type::F32},
      {"i8", {1}, Type::I8},
  };
  std::mt19937 rng(1234);
  std::vector<std::vector<uint8_t>> data;
  for (const T& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.ne) n *= d;
    std::vector<uint8_t> d(les::row_bytes(s.type, n));
    for (uint8_t& x : d) x = static_cast<uint8_t>(rng());
    data.push_back(std::move(d));
  }
  for (uint64_t alignment : {32u, 64u, 1u}) {
    SCOPED_TRACE(alignment);
    TempDir dir;
    Writer w;
    w.set_alignment(alignment);
    w.add_string("general.architecture", "test");
    for (size_t i = 0; i < specs.size(); ++i) {
      if (i % 2 == 0) {
        w.add_tensor(specs[i].name, specs[i].ne, specs[i].type, data[i].data());
      } else {
        const std::vector<uint8_t>* src = &data[i];
        w.add_tensor(specs[i].name, specs[i].ne, specs[i].type,
                     Writer::FillFn([src](void* dst, uint64_t n) {
                       ASSERT_EQ(n, src->size());
                       std::memcpy(dst, src->data(), n);
                     }));
      }
    }
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    const std::string path = dir.file("t.gguf");
    w.write(path, [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); });
    const std::vector<uint8_t> bytes = read_bytes(path);

    ASSERT_FALSE(calls.empty());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].second, bytes.size());
      if (i) {
        EXPECT_GE(calls[i].first, calls[i - 1].first);
      }
    }
    EXPECT_EQ(calls.back().first, bytes.size());
    EXPECT_EQ(dir.n_entries(), 1u);  // no temporary left behind

    const File f = les::gguf::read_file(path);
    EXPECT_EQ(f.alignment, alignment);
    if (alignment != 32) {
      ASSERT_NE(f.find("general.alignment"), nullptr);
      EXPECT_EQ(f.get("general.alignment").type, ValueType::UINT32);
      EXPECT_EQ(uint64_t(f.get_int("general.alignment")), alignment);
    } else {
      EXPECT_EQ(f.find("general.alignment"), nullptr);
    }
    EXPECT_EQ(f.data_offset, w.header_bytes());
    EXPECT_EQ(f.data_offset % alignment, 0u);
    EXPECT_EQ(f.file_size, bytes.size());
    ASSERT_EQ(f.tensors.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const les::gguf::TensorInfo& t = f.tensors[i];
      EXPECT_EQ(t.name, specs[i].name);
      EXPECT_EQ(t.ne, specs[i].ne);
      EXPECT_EQ(t.type, specs[i].type);
      EXPECT_EQ(t.n_bytes, data[i].size());
      EXPECT_EQ(t.offset % alignment, 0u);
      ASSERT_LE(f.data_offset + t.offset + t.n_bytes, bytes.size());
      EXPECT_TRUE(std::equal(data[i].begin(), data[i].end(),
                             bytes.begin() + static_cast<ptrdiff_t>(f.data_offset + t.offset)))
          << t.name;
      EXPECT_EQ(f.find_tensor(specs[i].name), &t);
    }
    EXPECT_EQ(f.find_tensor("nope"), nullptr);
    EXPECT_EQ(f.tensors[1].n_elements(), 15);
    EXPECT_EQ(f.tensors[9].n_elements(), 0);
  }
}

// A tensor filled piecewise: pieces are whole units, at most the writer's piece size (or one
// unit when that is larger), in order, and cover the tensor exactly once.
TEST(GgufRoundTrip, PiecewiseFillCoversTheTensorInWholeUnits) {
  std::mt19937 rng(77);
  std::vector<uint8_t> src(10000);
  for (uint8_t& x : src) x = static_cast<uint8_t>(rng());
  for (uint64_t piece : {uint64_t(4096), uint64_t(500), uint64_t(1) << 20}) {
    SCOPED_TRACE(piece);
    TempDir dir;
    Writer w;
    w.set_fill_piece(piece);
    w.add_string("general.architecture", "test");
    std::vector<std::pair<uint64_t, uint64_t>> pieces;
    w.add_tensor("rows", {1000, 10}, Type::I8,
                 Writer::ChunkFillFn([&](void* dst, uint64_t offset, uint64_t n) {
                   pieces.emplace_back(offset, n);
                   std::memcpy(dst, src.data() + offset, n);
                 }),
                 1000);
    const std::string path = dir.file("p.gguf");
    w.write(path);
    uint64_t next = 0;
    for (const auto& [off, n] : pieces) {
      EXPECT_EQ(off, next);
      EXPECT_EQ(off % 1000, 0u);
      EXPECT_EQ(n % 1000, 0u);
      EXPECT_LE(n, std::max<uint64_t>(piece, 1000));
      next = off + n;
    }
    EXPECT_EQ(next, src.size());
    EXPECT_EQ(pieces.size(), piece >= src.size() ? 1u : (piece < 1000 ? 10u : 3u));
    const File f = les::gguf::read_file(path);
    const std::vector<uint8_t> bytes = read_bytes(path);
    ASSERT_EQ(f.tensors.size(), 1u);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), bytes.begin() + static_cast<ptrdiff_t>(f.data_offset)));
  }
}

TEST(GgufRoundTrip, HeaderLargerThanFirstRead) {
  // read_file starts with a 1 MiB prefix; a 3 MiB string forces it to read more.
  TempDir dir;
  std::string big(3u << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>('a' + i % 26);
  Writer w;
  w.add_string("big", big);
  std::vector<std::string> many(100000, "tok");
  w.add_string_array("many", many);
  const float x[4] = {1, 2, 3, 4};
  w.add_tensor("x", {4}, Type::F32, x);
  const std::string path = dir.file("big.gguf");
  w.write(path);
  const File f = les::gguf::read_file(path);
  EXPECT_EQ(f.get_string("big"), big);
  EXPECT_EQ(f.get("many").arr.size(), many.size());
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_GT(f.data_offset, 3u << 20);

  // A prefix that covers the header parses; a shorter one is refused as a truncated buffer.
  const std::vector<uint8_t> bytes = read_bytes(path);
  const File g = les::gguf::parse(bytes.data(), f.data_offset, bytes.size());
  EXPECT_EQ(g.tensors.size(), 1u);
  try {
    les::gguf::parse(bytes.data(), 1u << 20, bytes.size());
    ADD_FAILURE() << "short prefix accepted";
  } catch (const les::Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Accessors

TEST(GgufAccessors, ConversionsAndErrors) {
  File f;
  f.kv.emplace_back("s", vs("text"));
  f.kv.emplace_back("neg", vi(ValueType::INT32, -5));
  f.kv.emplace_back("big", vu(ValueType::UINT64, std::numeric_limits<uint64_t>::max()));
  f.kv.emplace_back("two", vu(ValueType::UINT8, 2));
  f.kv.emplace_back("one", vi(ValueType::INT16, 1));
  f.kv.emplace_back("f", vf(ValueType::FLOAT32, 0.25));
  auto expect_msg = [](auto fn, const char* w1, const char* w2) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const les::Error& e) {
      EXPECT_NE(std::string(e.what()).find(w1), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(w2), std::string::npos) << e.what();
    }
  };
  expect_msg([&] { f.get("absent"); }, "missing key", "absent");
  expect_msg([&] { f.get_int("s"); }, "'s'", "expected an integer");
  expect_msg([&] { f.get_int("big"); }, "'big'", "int64");
  expect_msg([&] { f.get("neg").as_uint("neg"); }, "'neg'", "negative");
  expect_msg([&] { f.get_bool("two", false); }, "'two'", "bool");
  expect_msg([&] { f.get_string("neg"); }, "'neg'", "string");
  expect_msg([&] { f.get_float("s"); }, "'s'", "number");
  EXPECT_EQ(f.get_int("absent", 42), 42);
  EXPECT_EQ(f.get_float("absent", 1.5), 1.5);
  EXPECT_EQ(f.get_string("absent", "d"), "d");
  EXPECT_TRUE(f.get_bool("absent", true));
  EXPECT_EQ(f.get_int("neg"), -5);
  EXPECT_EQ(f.get_float("neg"), -5.0);
  EXPECT_EQ(f.get_float("f"), 0.25);
  EXPECT_TRUE(f.get_bool("one", false));
  EXPECT_EQ(f.get("big").as_uint("big"), std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(f.get("two").is_int());
  EXPECT_FALSE(f.get("f").is_int());
  EXPECT_TRUE(f.get("f").is_float());
  EXPECT_STREQ(les::gguf::value_type_name(ValueType::FLOAT64), "float64");
}

// ---------------------------------------------------------------------------------------------
// Writer validation and atomicity

TEST(GgufWriter, RefusesInvalidInput) {
  auto expect_msg = [](auto fn, const char* w) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected " << w;
    } catch (const les::Error& e) {
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  };
  Writer w;
  w.add_u32("k", 1);
  expect_msg([&] { w.add_u32("k", 2); }, "duplicate key");
  expect_msg([&] { w.add("u8", vu(ValueType::UINT8, 256)); }, "out of range");
  expect_msg([&] { w.add("i16", vi(ValueType::INT16, 40000)); }, "out of range");
  expect_msg([&] { w.add("b", vu(ValueType::BOOL, 2)); }, "out of range");
  expect_msg([&] { w.add("mixed", varr(ValueType::INT32, {vs("x")})); }, "element 0");
  expect_msg([&] { w.add("general.alignment", vu(ValueType::UINT64, 32)); }, "uint32");
  expect_msg([&] { w.add("general.alignment", vu(ValueType::UINT32, 24)); }, "power of two");
  expect_msg([&] { w.set_alignment(0); }, "power of two");
  Value deep = varr(ValueType::INT32, {});
  for (int i = 0; i < les::gguf::kMaxArrayDepth; ++i) deep = varr(ValueType::ARRAY, {deep});
  expect_msg([&] { w.add("deep", deep); }, "nested");
  const float x[64] = {};
  w.add_tensor("t", {64}, Type::F32, x);
  expect_msg([&] { w.add_tensor("t", {64}, Type::F32, x); }, "duplicate tensor");
  expect_msg([&] { w.add_tensor("q", {48}, Type::Q8_0, x); }, "block size");
  expect_msg([&] { w.add_tensor("d0", {}, Type::F32, x); }, "n_dims");
  expect_msg([&] { w.add_tensor("d5", {1, 1, 1, 1, 1}, Type::F32, x); }, "n_dims");
  expect_msg([&] { w.add_tensor("neg", {-1}, Type::F32, x); }, "negative");
  expect_msg([&] { w.add_tensor("ovf", {int64_t(1) << 40, int64_t(1) << 40}, Type::F32, x); },
             "overflow");
  expect_msg([&] { w.add_tensor("ty", {4}, static_cast<Type>(99), x); }, "unknown type id 99");
  expect_msg([&] { w.add_tensor("null", {4}, Type::F32, static_cast<const void*>(nullptr)); },
             "null data");
  // The refused tensors were not kept: the file has one tensor.
  TempDir dir;
  w.write(dir.file("ok.gguf"));
  EXPECT_EQ(les::gguf::read_file(dir.file("ok.gguf")).tensors.size(), 1u);
}

TEST(GgufWriter, FailedWriteLeavesNoOutputAndKeepsOldFile) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  {
    Writer w;
    w.add_string("version", "old");
    w.write(path);
  }
  const std::vector<uint8_t> old_bytes = read_bytes(path);

  Writer w;
  w.add_string("version", "new");
  const float x[8] = {};
  w.add_tensor("a", {8}, Type::F32, x);
  w.add_tensor("b", {8}, Type::F32, Writer::FillFn([](void*, uint64_t) {
                 throw les::Error("fill failed");
               }));
  EXPECT_THROW(w.write(path), les::Error);
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_EQ(dir.n_entries(), 1u);  // the temporary is gone

  // An unwritable location names the path and the errno text.
  const std::string bad = dir.file("no/such/dir/x.gguf");
  try {
    w.write(bad);
    ADD_FAILURE() << "write into a missing directory succeeded";
  } catch (const les::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  }
}

TEST(GgufWriter, DiskFullLeavesNoPartialOutput) {
  // RLIMIT_FSIZE makes write() fail with EFBIG part way, like a full disk; done in a child so
  // the limit does not leak into this process.
  TempDir dir;
  const std::string path = dir.file("full.gguf");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {64 << 10, 64 << 10};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(10);
    std::vector<uint8_t> data(1 << 20, 7);
    Writer w;
    w.add_string("k", "v");
    w.add_tensor("big", {int64_t(data.size())}, Type::I8, data.data());
    try {
      w.write(path);
      ::_exit(11);
    } catch (const les::Error& e) {
      const std::string msg = e.what();
      if (msg.find(path) == std::string::npos) ::_exit(12);
      if (msg.find("File too large") == std::string::npos) ::_exit(13);
      ::_exit(0);
    } catch (...) {
      ::_exit(14);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(dir.n_entries(), 0u);
}

// ---------------------------------------------------------------------------------------------
// The trained model

TEST(GgufModel, TinyMoeParses) {
  const std::string path = les::test::tiny_moe_path();
  LES_REQUIRE_FILE(path);
  const File f = les::gguf::read_file(path);
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.file_size, 38108800u);
  EXPECT_EQ(f.get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(f.get_int("qwen3moe.block_count"), 8);
  EXPECT_EQ(f.get_int("qwen3moe.embedding_length"), 256);
  EXPECT_EQ(f.get_int("qwen3moe.expert_count"), 64);
  EXPECT_EQ(f.get_int("qwen3moe.expert_used_count"), 4);
  EXPECT_EQ(f.get_int("qwen3moe.attention.head_count"), 4);
  EXPECT_EQ(f.get_int("qwen3moe.attention.head_count_kv"), 2);
  EXPECT_NEAR(f.get_float("qwen3moe.rope.freq_base"), 10000.0, 1e-3);
  EXPECT_NEAR(f.get_float("qwen3moe.attention.layer_norm_rms_epsilon"), 1e-6, 1e-12);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get("tokenizer.ggml.tokens").arr.size(), 8000u);
  EXPECT_EQ(f.get("tokenizer.ggml.merges").arr.size(), 7741u);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 7997);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token", true));

  // 3 global tensors + 12 per layer.
  EXPECT_EQ(f.tensors.size(), 3u + 8 * 12);
  struct Shape { std::string name; std::vector<int64_t> ne; Type type; };
  const std::vector<Shape> shapes = {
      {"token_embd.weight", {256, 8000}, Type::Q4_K},
      {"output.weight", {256, 8000}, Type::Q6_K},
      {"output_norm.weight", {256}, Type::F32},
      {"blk.0.attn_q.weight", {256, 256}, Type::Q4_K},
      {"blk.0.attn_v.weight", {256, 128}, Type::Q6_K},
      {"blk.3.attn_k.weight", {256, 128}, Type::Q4_K},
      {"blk.5.attn_q_norm.weight", {64}, Type::F32},
      {"blk.7.ffn_gate_inp.weight", {256, 64}, Type::F32},
      {"blk.7.ffn_gate_exps.weight", {256, 128, 64}, Type::Q4_K},
      {"blk.0.ffn_down_exps.weight", {128, 256, 64}, Type::Q8_0},
      {"blk.2.ffn_down_exps.weight", {128, 256, 64}, Type::Q5_0},
  };
  for (const Shape& s : shapes) {
    const les::gguf::TensorInfo* t = f.find_tensor(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->ne, s.ne) << s.name;
    EXPECT_EQ(t->type, s.type) << s.name;
  }
  for (int l = 0; l < 8; ++l) {
    for (const char* n : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm",
                          "attn_k_norm", "ffn_norm", "ffn_gate_inp", "ffn_gate_exps",
                          "ffn_up_exps", "ffn_down_exps"}) {
      const std::string name = "blk." + std::to_string(l) + "." + n + ".weight";
      EXPECT_NE(f.find_tensor(name), nullptr) << name;
    }
  }
  uint64_t end = 0;
  for (const auto& t : f.tensors) end = std::max(end, f.data_offset + t.offset + t.n_bytes);
  EXPECT_LE(end, f.file_size);
  EXPECT_GT(end + f.alignment, f.file_size);
}

TEST(GgufModel, LlamaCppVocabFilesParse) {
  // Vocabulary-only files written by llama.cpp: no tensors and no trailing padding.
  struct Want { const char* file; const char* model; size_t n_tokens; const char* list; size_t n; };
  const Want want[] = {
      {"ggml-vocab-llama-bpe.gguf", "gpt2", 128256, "tokenizer.ggml.merges", 280147},
      {"ggml-vocab-llama-spm.gguf", "llama", 32000, "tokenizer.ggml.scores", 32000},
      {"ggml-vocab-qwen2.gguf", "gpt2", 151936, "tokenizer.ggml.merges", 151387},
  };
  for (const Want& w : want) {
    const std::string path = std::string(LES_SOURCE_DIR) + "/tests/data/vocab/" + w.file;
    LES_REQUIRE_FILE(path);
    SCOPED_TRACE(path);
    const File f = les::gguf::read_file(path);
    EXPECT_TRUE(f.tensors.empty());
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), w.model);
    EXPECT_EQ(f.get("tokenizer.ggml.tokens").arr.size(), w.n_tokens);
    EXPECT_EQ(f.get("tokenizer.ggml.token_type").arr.size(), w.n_tokens);
    EXPECT_EQ(f.get(w.list).arr.size(), w.n);
    EXPECT_GE(f.data_offset, f.file_size);
  }
}

// ---------------------------------------------------------------------------------------------
// Corrupt files

TEST(GgufCorrupt, SmallFileIsValid) {
  const Built b = build(small_file());
  const File f = parse_vec(b.bytes);
  EXPECT_EQ(f.kv.size(), 4u);
  EXPECT_EQ(f.get_string("general.architecture"), "tiny");
  const Value& nums = f.get("nums");
  ASSERT_EQ(nums.arr.size(), 2u);
  EXPECT_EQ(nums.arr[1].as_int("nums"), -3);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[1].n_bytes, 68u);
  EXPECT_EQ(f.data_offset, b.data_offset);
  EXPECT_EQ(f.data_offset + 100, b.bytes.size());
}

TEST(GgufCorrupt, TruncationAtEveryByte) {
  const Built b = build(small_file());
  // Every proper prefix, taken as a whole file, is refused with an offset in the message.
  for (size_t n = 0; n < b.bytes.size(); ++n) {
    std::vector<uint8_t> cut(b.bytes.begin(), b.bytes.begin() + static_cast<ptrdiff_t>(n));
    try {
      parse_vec(cut);
      ADD_FAILURE() << "truncated to " << n << " bytes accepted";
    } catch (const les::Error& e) {
      EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
    }
  }
  // At structural boundaries inside the header the message says the file is truncated (or that
  // the declared contents cannot fit in what is left).
  for (size_t n : b.boundaries) {
    if (n >= b.bytes.size()) continue;
    std::vector<uint8_t> cut(b.bytes.begin(), b.bytes.begin() + static_cast<ptrdiff_t>(n));
    try {
      parse_vec(cut);
      ADD_FAILURE() << "truncated to " << n << " bytes accepted";
    } catch (const les::Error& e) {
      const std::string msg = e.what();
      const bool ok = msg.find("truncated") != std::string::npos ||
                      msg.find("does not fit") != std::string::npos ||
                      msg.find("past the end") != std::string::npos;
      EXPECT_TRUE(ok) << "at " << n << ": " << msg;
    }
  }
  // Truncating inside the data section: the last tensor extends past the end.
  std::vector<uint8_t> cut(b.bytes.begin(), b.bytes.end() - 1);
  expect_error(cut, {"tensor 'b'", "past the end"});
  // Truncating right after the tensor infos: the data section starts past the end.
  std::vector<uint8_t> cut2(b.bytes.begin(), b.bytes.begin() + static_cast<ptrdiff_t>(b.boundaries.back()));
  expect_error(cut2, {"data section", "past the end"});
  // Prefix buffers of a complete file: short ones are refused, covering ones parse.
  for (size_t n = 0; n <= b.bytes.size(); ++n) {
    if (n < b.boundaries.back()) {
      EXPECT_THROW(les::gguf::parse(b.bytes.data(), n, b.bytes.size()), les::Error) << n;
    } else {
      EXPECT_EQ(les::gguf::parse(b.bytes.data(), n, b.bytes.size()).tensors.size(), 2u) << n;
    }
  }
  EXPECT_THROW(les::gguf::parse(nullptr, 0, 0), les::Error);
}

TEST(GgufCorrupt, HeaderFields) {
  RawFile f = small_file();
  f.magic = "GGUG";
  expect_error(build(f).bytes, {"bad magic", "offset 0"});
  f = small_file();
  f.version = 1;
  expect_error(build(f).bytes, {"version 1", "offset 4"});
  f.version = 4;
  expect_error(build(f).bytes, {"version 4", "offset 4"});
  f.version = 2;
  EXPECT_EQ(parse_vec(build(f).bytes).version, 2u);
  f = small_file();
  f.n_tensors = int64_t(1) << 60;
  expect_error(build(f).bytes, {"tensor count", "offset 8"});
  f.n_tensors = 1000;
  expect_error(build(f).bytes, {"tensor count 1000", "does not fit"});
  f = small_file();
  f.n_kv = int64_t(1) << 60;
  expect_error(build(f).bytes, {"key count", "does not fit", "offset 16"});
  f.n_kv = 5;  // one more key than present: parsing runs into the tensor infos
  try {
    parse_vec(build(f).bytes);
    ADD_FAILURE();
  } catch (const les::Error&) {
  }
}

TEST(GgufCorrupt, Strings) {
  for (uint64_t len : {uint64_t(1) << 62, (uint64_t(1) << 30) + 1, uint64_t(~0ull)}) {
    RawFile f = small_file();
    Bytes k;
    k.str("x").u32(8).u64(len).raw("abc");
    f.kvs.insert(f.kvs.begin(), k);
    const Built b = build(f);
    expect_error(b.bytes, {"key 'x'", "string length", "exceeds"});
  }
  // A length that passes the 1 GiB cap but runs past the buffer.
  RawFile f = small_file();
  Bytes k;
  k.str("y").u32(8).u64(100000).raw("abc");
  f.kvs.push_back(k);
  expect_error(build(f).bytes, {"key 'y'", "bytes left"});
  // A huge key length.
  f = small_file();
  Bytes k2;
  k2.u64(uint64_t(1) << 40).raw("zz");
  f.kvs.insert(f.kvs.begin() + 1, k2);
  expect_error(build(f).bytes, {"key #1", "key length"});
  // A huge tensor name length.
  f = small_file();
  const Built b0 = build(f);
  std::vector<uint8_t> bytes = b0.bytes;
  const size_t name_off = b0.tensor_offsets[1];
  for (int i = 0; i < 8; ++i) bytes[name_off + i] = 0xff;
  expect_error(bytes, {"tensor #1", "tensor name length"});
}

TEST(GgufCorrupt, Arrays) {
  // 2^60 elements must be refused before anything is allocated.
  for (uint32_t elem : {0u, 8u, 9u, 12u}) {
    RawFile f = small_file();
    Bytes k;
    k.str("arr").u32(9).u32(elem).u64(uint64_t(1) << 60);
    f.kvs.push_back(k);
    expect_error(build(f).bytes, {"key 'arr'", "array of 1152921504606846976", "does not fit"});
  }
  RawFile f = small_file();
  Bytes k;
  k.str("arr").u32(9).u32(13).u64(1).u8(0);
  f.kvs.push_back(k);
  expect_error(build(f).bytes, {"key 'arr'", "unknown array element type 13"});
  // Nesting deeper than the cap (each level: type ARRAY + count 1).
  f = small_file();
  Bytes deep;
  deep.str("deep").u32(9);
  for (int i = 0; i < les::gguf::kMaxArrayDepth + 1; ++i) deep.u32(9).u64(1);
  deep.u32(0).u64(0);
  f.kvs.push_back(deep);
  expect_error(build(f).bytes, {"key 'deep'", "nested deeper"});
  // At the cap it parses.
  f = small_file();
  Bytes ok;
  ok.str("deep").u32(9);
  for (int i = 0; i < les::gguf::kMaxArrayDepth - 1; ++i) ok.u32(9).u64(1);
  ok.u32(0).u64(0);
  f.kvs.push_back(ok);
  EXPECT_EQ(parse_vec(build(f).bytes).kv.size(), 5u);
  // An empty nested array.
  f = small_file();
  Bytes empty;
  empty.str("e").u32(9).u32(9).u64(0);
  f.kvs.push_back(empty);
  const File pf = parse_vec(build(f).bytes);
  EXPECT_EQ(pf.get("e").elem_type, ValueType::ARRAY);
  EXPECT_TRUE(pf.get("e").arr.empty());
}

TEST(GgufCorrupt, ValuesAndKeys) {
  RawFile f = small_file();
  Bytes k;
  k.str("weird").u32(77).u32(0);
  f.kvs.push_back(k);
  expect_error(build(f).bytes, {"key 'weird'", "unknown value type 77"});
  f = small_file();
  Bytes b;
  b.str("flag").u32(7).u8(2);
  f.kvs.push_back(b);
  expect_error(build(f).bytes, {"key 'flag'", "invalid bool"});
  f = small_file();
  f.kvs.push_back(kv_str("general.architecture", "again"));
  const Built bd = build(f);
  expect_error(bd.bytes, {"key 'general.architecture'", "duplicate key",
                          ("offset " + std::to_string(bd.kv_offsets[4])).c_str()});
  // Untrusted key bytes are escaped in the message.
  f = small_file();
  f.kvs.push_back(kv_str(std::string("bad\x01\n'key", 9), "v"));
  f.kvs.push_back(kv_str(std::string("bad\x01\n'key", 9), "v"));
  expect_error(build(f).bytes, {"key 'bad\\x01\\x0a\\x27key'", "duplicate"});
}

TEST(GgufCorrupt, Alignment) {
  RawFile f = small_file();
  Bytes k;
  k.str("general.alignment").u32(10).u64(32);  // uint64 instead of uint32
  f.kvs[1] = k;
  expect_error(build(f).bytes, {"key 'general.alignment'", "uint32", "uint64"});
  for (uint32_t bad : {0u, 3u, 48u, 0xffffffffu}) {
    f = small_file();
    f.kvs[1] = kv_u32("general.alignment", bad);
    expect_error(build(f).bytes, {"key 'general.alignment'", "power of two",
                                  std::to_string(bad).c_str()});
  }
  // A valid non-default alignment: offsets must be multiples of it.
  f = small_file();
  f.kvs[1] = kv_u32("general.alignment", 64);
  f.alignment = 64;
  expect_error(build(f).bytes, {"tensor 'b'", "offset 32 is not a multiple of the alignment 64"});
  f.tensors[1].offset = 64;
  f.data_bytes = 64 + 68;
  const File pf = parse_vec(build(f).bytes);
  EXPECT_EQ(pf.alignment, 64u);
  EXPECT_EQ(pf.data_offset % 64, 0u);
}

TEST(GgufCorrupt, TensorInfos) {
  auto with = [](auto mutate) {
    RawFile f = small_file();
    mutate(f);
    return build(f);
  };
  expect_error(with([](RawFile& f) { f.tensors[0].ne = {}; }).bytes,
               {"tensor 'a'", "n_dims 0"});
  expect_error(with([](RawFile& f) { f.tensors[0].ne = {8, 1, 1, 1, 1}; }).bytes,
               {"tensor 'a'", "n_dims 5"});
  expect_error(with([](RawFile& f) { f.tensors[0].ne = {uint64_t(-8)}; }).bytes,
               {"tensor 'a'", "negative", "-8"});
  expect_error(with([](RawFile& f) { f.tensors[0].ne = {8, uint64_t(1) << 62, 4}; }).bytes,
               {"tensor 'a'", "overflow"});
  // Element count fits in int64 but the byte size (4 bytes each) does not fit in uint64.
  expect_error(with([](RawFile& f) { f.tensors[0].ne = {uint64_t(1) << 62}; }).bytes,
               {"tensor 'a'", "byte size overflows"});
  expect_error(with([](RawFile& f) { f.tensors[1].ne = {48, 2}; }).bytes,
               {"tensor 'b'", "ne[0]=48", "block size 32", "q8_0"});
  {
    const Built b = with([](RawFile& f) { f.tensors[1].type = 99; });
    expect_error(b.bytes, {"tensor 'b'", "unknown type id 99",
                           ("at offset " + std::to_string(b.tensor_type_offsets[1])).c_str()});
  }
  expect_error(with([](RawFile& f) { f.tensors[1].type = 4; }).bytes, {"unknown type id 4"});
  expect_error(with([](RawFile& f) { f.tensors[1].offset = 40; }).bytes,
               {"tensor 'b'", "offset 40", "alignment 32"});
  expect_error(with([](RawFile& f) { f.tensors[1].offset = 64; }).bytes,
               {"tensor 'b'", "past the end"});
  expect_error(with([](RawFile& f) { f.tensors[1].offset = uint64_t(-32); }).bytes,
               {"tensor 'b'", "past the end"});
  expect_error(with([](RawFile& f) { f.tensors[1].ne = {32, 2, 1, uint64_t(1) << 40}; }).bytes,
               {"tensor 'b'", "past the end"});
  // Overlap: b placed at 0 overlaps a.
  expect_error(with([](RawFile& f) { f.tensors[1].offset = 0; }).bytes,
               {"overlaps tensor", "'a'"});
  // Overlap regardless of order in the file: a placed inside b.
  expect_error(with([](RawFile& f) {
                 f.tensors[0].offset = 64;
                 f.tensors[1].offset = 32;
                 f.data_bytes = 132;
               }).bytes, {"overlaps"});
  // Zero-sized tensors never overlap anything.
  EXPECT_NO_THROW(parse_vec(with([](RawFile& f) {
                    f.tensors.push_back({"z", {0, 3}, 0, 32});
                  }).bytes));
  expect_error(with([](RawFile& f) { f.tensors[1].name = "a"; }).bytes,
               {"tensor 'a'", "duplicate tensor name"});
}

// ---------------------------------------------------------------------------------------------
// Mutation loop: every mutated copy either parses (to something self-consistent) or throws
// les::Error; nothing else escapes and nothing crashes.

TEST(GgufFuzz, SeededMutations) {
  const Built base = build(small_file());
  std::mt19937_64 rng(20240601);
  const uint64_t interesting[] = {0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 31, 32, 33, 64, 255, 256,
                                  0x7fffffff, 0x80000000, 0xffffffff, uint64_t(1) << 32,
                                  uint64_t(1) << 60, uint64_t(1) << 62, uint64_t(-1),
                                  uint64_t(1) << 63, uint64_t(-32)};
  int parsed = 0;
  int refused = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> b = base.bytes;
    const int n_mut = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < n_mut && !b.empty(); ++m) {
      const size_t pos = rng() % b.size();
      switch (rng() % 6) {
        case 0: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: b[pos] = static_cast<uint8_t>(rng()); break;
        case 2: {  // an interesting little-endian 32/64-bit value
          const uint64_t v = interesting[rng() % std::size(interesting)];
          const size_t w = rng() % 2 ? 8 : 4;
          for (size_t i = 0; i < w && pos + i < b.size(); ++i) b[pos + i] = uint8_t(v >> (8 * i));
          break;
        }
        case 3: b.resize(pos); break;
        case 4: {  // duplicate a slice
          const size_t len = std::min<size_t>(rng() % 32, b.size() - pos);
          std::vector<uint8_t> s(b.begin() + static_cast<ptrdiff_t>(pos),
                                 b.begin() + static_cast<ptrdiff_t>(pos + len));
          b.insert(b.begin() + static_cast<ptrdiff_t>(rng() % b.size()), s.begin(), s.end());
          break;
        }
        case 5: {  // delete a slice
          const size_t len = std::min<size_t>(rng() % 16, b.size() - pos);
          b.erase(b.begin() + static_cast<ptrdiff_t>(pos),
                  b.begin() + static_cast<ptrdiff_t>(pos + len));
          break;
        }
      }
    }
    // Parse exactly the mutated bytes from a heap copy of their own size, so that a sanitizer
    // build sees any read past the end.
    std::unique_ptr<uint8_t[]> heap(new uint8_t[b.size()]);
    if (!b.empty()) std::memcpy(heap.get(), b.data(), b.size());
    const size_t prefix = rng() % 4 == 0 && !b.empty() ? rng() % b.size() : b.size();
    try {
      const File f = les::gguf::parse(heap.get(), prefix, b.size());
      ++parsed;
      EXPECT_TRUE(f.version == 2 || f.version == 3);
      EXPECT_TRUE(f.alignment != 0 && (f.alignment & (f.alignment - 1)) == 0);
      for (const auto& t : f.tensors) {
        EXPECT_GE(t.ne.size(), 1u);
        EXPECT_LE(t.ne.size(), 4u);
        EXPECT_EQ(t.offset % f.alignment, 0u);
        EXPECT_LE(f.data_offset + t.offset + t.n_bytes, f.file_size);
        EXPECT_EQ(t.n_bytes, les::row_bytes(t.type, t.n_elements()));
      }
    } catch (const les::Error&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": non-les exception: " << e.what();
    } catch (...) {
      ADD_FAILURE() << "iteration " << iter << ": unknown exception";
    }
  }
  // Both outcomes occur, i.e. the mutations are neither all harmless nor all fatal.
  EXPECT_GT(parsed, 50);
  EXPECT_GT(refused, 1000);
}

TEST(GgufFuzz, ReadFileErrors) {
  TempDir dir;
  try {
    les::gguf::read_file(dir.file("missing.gguf"));
    ADD_FAILURE();
  } catch (const les::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir.file("missing.gguf")), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  }
  try {
    les::gguf::read_file(dir.path.string());
    ADD_FAILURE();
  } catch (const les::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  // A corrupt file on disk: the message names the path and the tensor.
  RawFile f = small_file();
  f.tensors[1].type = 99;
  const std::vector<uint8_t> bytes = build(f).bytes;
  const std::string path = dir.file("bad.gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  try {
    les::gguf::read_file(path);
    ADD_FAILURE();
  } catch (const les::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor 'b'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown type id 99"), std::string::npos) << msg;
  }
}

}  // namespace
