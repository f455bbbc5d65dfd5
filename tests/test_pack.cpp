// Packed expert storage (les pack / les verify): the packed file is a valid GGUF with one 4 KiB-
// aligned row per expert; logits are bit-identical to the source's (resident and streamed,
// ondemand and lookahead); an expert miss is exactly one read; corrupt, truncated and
// inconsistent files give clear errors; the writer refuses to overwrite and leaves nothing behind
// when it fails.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>

#include "load_modes.h"
#include "les/gguf/gguf.h"
#include "les/model/context.h"
#include "les/pack/pack.h"
#include "les/pack/pack_format.h"
#include "les/sched/streaming_experts.h"
#include "les/storage/expert_layout.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "les/util/hash.h"
#include "les/util/mapped_file.h"
#include "greedy_hashes.h"
#include "test_util.h"

using namespace les;
using les::test::tiny_moe_path;

namespace {

std::vector<uint64_t> run_hashes(const Model& m, ExpertSource* src, const std::vector<int32_t>& prompt, int n_gen = 8) {
  return les::test::greedy_hashes(m, src, prompt, n_gen);
}
using les::test::stream_opts;

const std::vector<int32_t> kTinyPrompt = {785, 3974, 293, 4830, 282, 5131, 7784, 82};
const std::vector<int32_t> kSynthPrompt = {11, 97, 203, 5, 88, 301, 42, 7};

// A temporary directory removed (with its files) at scope exit.
struct TempDir {
  std::string path = les::test::temp_dir();
  ~TempDir() {
    for (const auto& n : entries()) ::unlink((path + "/" + n).c_str());
    ::rmdir(path.c_str());
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(path.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) out.emplace_back(e->d_name);
      }
      ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::string synth_model(const TempDir& d) {
  synth::SynthSpec s = synth::shape_spec("tiny");
  // The "tiny" shape with n_embd 256: gate/up rows of 256 are q4_K, down rows of 64 fall back to
  // q5_0 (llama.cpp's rule). An expert is 29,696 bytes: its packed row of 32 KiB has padding.
  s.type = "q4_K";
  s.n_embd = 256;
  const std::string p = d.file("synth-tiny.gguf");
  synth::write_synth_model(s, p);
  return p;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const les::Error& e) {
    return e.what();
  }
  return "";
}

// Copies a GGUF file with its metadata passed through `edit` (tensors unchanged).
void rewrite_kv(const std::string& in, const std::string& out,
                const std::function<void(std::vector<std::pair<std::string, gguf::Value>>&)>& edit) {
  const gguf::File f = gguf::read_file(in);
  const MappedFile map = MappedFile::open(in);
  auto kv = f.kv;
  edit(kv);
  gguf::Writer w;
  w.set_alignment(f.alignment);
  for (auto& [k, v] : kv) {
    if (k != "general.alignment") w.add(k, v);
  }
  for (const auto& t : f.tensors) w.add_tensor(t.name, t.ne, t.type, static_cast<const void*>(map.data() + f.data_offset + t.offset));
  w.write(out);
}

gguf::Value* find_kv(std::vector<std::pair<std::string, gguf::Value>>& kv, const std::string& key) {
  for (auto& [k, v] : kv) {
    if (k == key) return &v;
  }
  return nullptr;
}

// Logits of the source and its packed copy agree bit for bit: resident (mmap) and streamed
// (ondemand and lookahead, real and fake I/O), with and without read verification.
void expect_identical_logits(const std::string& src, const std::string& packed, const std::vector<int32_t>& prompt) {
  auto ref_model = Model::load(src);
  const auto ref = run_hashes(*ref_model, nullptr, prompt);
  auto resident = Model::load(packed);
  ASSERT_NE(resident->packed(), nullptr);
  EXPECT_EQ(run_hashes(*resident, nullptr, prompt), ref) << "packed, resident (mmap)";
  auto streamed = Model::load(packed, LoadOptions{.map_experts = false});
  EXPECT_EQ(streamed->weights().layers[0].gate.data, nullptr);
  const int total = streamed->config().n_layer * streamed->config().n_expert;
  const auto bytes = les::test::read_bytes(packed);
  for (Schedule s : {Schedule::ondemand, Schedule::lookahead}) {
    for (int slots : {streamed->config().n_expert_used, total / 4}) {
      StreamingExperts ex(*streamed, stream_opts(*streamed, s, storage::IoMode::pread, slots));
      EXPECT_EQ(run_hashes(*streamed, &ex, prompt), ref) << "packed, " << schedule_name(s) << " slots=" << slots;
      EXPECT_GT(ex.stats().total().misses, 0u);
    }
    StreamingOptions o = stream_opts(*streamed, s, storage::IoMode::fake, total / 4);
    o.file = storage::make_memory_file(bytes, "packed (fake)", 4096);
    o.verify_reads = true;
    StreamingExperts ex(*streamed, o);
    EXPECT_EQ(run_hashes(*streamed, &ex, prompt), ref) << "packed, fake I/O, verify_reads, " << schedule_name(s);
  }
}

}  // namespace

TEST(Pack, WritesAValidAlignedGgufWithTheSourceBytes) {
  TempDir d;
  const std::string src = synth_model(d);
  const std::string out = d.file("packed.gguf");
  const pack::PackSummary sum = pack::pack_model(src, out);
  EXPECT_EQ(sum.layers, 4);
  EXPECT_EQ(sum.experts, 4 * 16);
  EXPECT_GT(sum.padding_bytes, 0u) << "these experts are not a multiple of 4 KiB: rows must be padded";

  const gguf::File in = gguf::read_file(src);
  const gguf::File pf = gguf::read_file(out);
  EXPECT_EQ(pf.alignment, 4096u);
  EXPECT_EQ(pf.data_offset % 4096, 0u);
  const MappedFile sm = MappedFile::open(src), pm = MappedFile::open(out);
  // Every key of the source is copied (alignment aside).
  for (const auto& [k, v] : in.kv) {
    if (k == "general.alignment") continue;
    const gguf::Value* pv = pf.find(k);
    ASSERT_NE(pv, nullptr) << k;
    EXPECT_EQ(pv->type, v.type) << k;
  }
  // Dense tensors: same names, types, shapes and bytes.
  for (const auto& t : in.tensors) {
    int part = 0;
    if (pack::source_tensor_layer(t.name, &part) >= 0) {
      EXPECT_EQ(pf.find_tensor(t.name), nullptr) << t.name << " must only exist packed";
      continue;
    }
    const gguf::TensorInfo* pt = pf.find_tensor(t.name);
    ASSERT_NE(pt, nullptr) << t.name;
    EXPECT_EQ(pt->type, t.type);
    EXPECT_EQ(pt->ne, t.ne);
    ASSERT_EQ(pt->n_bytes, t.n_bytes);
    EXPECT_EQ(std::memcmp(sm.data() + in.data_offset + t.offset, pm.data() + pf.data_offset + pt->offset, t.n_bytes), 0)
        << t.name;
  }
  // Packed rows: gate, up, down back to back, zero padding, checksums of the source bytes.
  const pack::PackInfo info = pack::read_pack_info(pf, out);
  EXPECT_EQ(info.version, pack::kFormatVersion);
  EXPECT_EQ(info.source_name, "synth-tiny.gguf");
  EXPECT_EQ(info.source_size, in.file_size);
  EXPECT_EQ(info.source_header_hash, hash64(sm.data(), in.data_offset));
  ASSERT_EQ(info.layers.size(), 4u);
  for (const pack::PackedLayer& pl : info.layers) {
    const gguf::TensorInfo* pt = pf.find_tensor(pack::packed_tensor_name(pl.layer));
    ASSERT_NE(pt, nullptr);
    EXPECT_EQ(pt->type, Type::I8);
    EXPECT_EQ(pt->ne, (std::vector<int64_t>{static_cast<int64_t>(pl.stride), 16}));
    EXPECT_EQ(pl.stride % 4096, 0u);
    EXPECT_EQ(pl.file_offset % 4096, 0u);
    EXPECT_EQ(pl.stride, (pl.data_bytes + 4095) / 4096 * 4096);
    const gguf::TensorInfo* st[3];
    for (int p = 0; p < 3; ++p) {
      st[p] = in.find_tensor(pack::source_tensor_name(pl.layer, p));
      ASSERT_NE(st[p], nullptr);
      EXPECT_EQ(pl.parts[p].tensor, st[p]->name);
      EXPECT_EQ(pl.parts[p].type, st[p]->type);
      EXPECT_EQ(pl.parts[p].ne, st[p]->ne);
      EXPECT_EQ(pl.parts[p].expert_bytes, st[p]->n_bytes / 16);
    }
    EXPECT_EQ(pl.parts[0].type, Type::Q4_K);
    for (int e = 0; e < 16; ++e) {
      const uint8_t* row = pm.data() + pl.file_offset + static_cast<uint64_t>(e) * pl.stride;
      std::vector<uint8_t> cat;
      for (int p = 0; p < 3; ++p) {
        const uint64_t eb = pl.parts[p].expert_bytes;
        const uint8_t* s = sm.data() + in.data_offset + st[p]->offset + static_cast<uint64_t>(e) * eb;
        EXPECT_EQ(pl.parts[p].offset, cat.size());
        EXPECT_EQ(std::memcmp(row + pl.parts[p].offset, s, eb), 0) << "layer " << pl.layer << " expert " << e;
        cat.insert(cat.end(), s, s + eb);
      }
      EXPECT_EQ(pl.checksums[static_cast<size_t>(e)], hash64(cat.data(), cat.size()));
      for (uint64_t i = pl.data_bytes; i < pl.stride; ++i) ASSERT_EQ(row[i], 0) << "padding of expert " << e;
    }
  }
  const pack::VerifySummary v = pack::verify_packed(out);
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  EXPECT_EQ(v.experts, 64);
  // The loaded packed model describes the same experts as the source.
  auto a = Model::load(src), b = Model::load(out);
  EXPECT_EQ(a->expert_bytes(), b->expert_bytes());
  EXPECT_EQ(a->dense_bytes(), b->dense_bytes());
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(a->expert_size(l), b->expert_size(l));
    const auto& la = a->weights().layers[static_cast<size_t>(l)];
    const auto& lb = b->weights().layers[static_cast<size_t>(l)];
    EXPECT_EQ(la.gate.expert_stride, la.gate.expert_bytes);
    EXPECT_EQ(lb.gate.expert_stride, info.layers[static_cast<size_t>(l)].stride);
    for (int e : {0, 7, 15}) {
      EXPECT_EQ(std::memcmp(la.down.expert(e).data, lb.down.expert(e).data, la.down.expert_bytes), 0);
      EXPECT_EQ(lb.up.expert_file_offset(e),
                info.layers[static_cast<size_t>(l)].file_offset + static_cast<uint64_t>(e) * lb.up.expert_stride +
                    info.layers[static_cast<size_t>(l)].parts[1].offset);
    }
  }
}

TEST(Pack, SyntheticLogitsBitIdentical) {
  TempDir d;
  const std::string src = synth_model(d);
  const std::string out = d.file("packed.gguf");
  pack::pack_model(src, out);
  expect_identical_logits(src, out, kSynthPrompt);
}

// The non-linear types: gate/up rows of 256 are iq4_xs, down rows of 64 fall back to iq4_nl.
// Packed, resident and streamed, and `les verify`'s checks, as for the K-quants.
TEST(Pack, Iq4ModelLogitsBitIdentical) {
  TempDir d;
  synth::SynthSpec s = synth::shape_spec("tiny");
  s.type = "iq4_xs";
  s.n_embd = 256;
  const std::string src = d.file("synth-tiny-iq4.gguf");
  synth::write_synth_model(s, src);
  const std::string out = d.file("packed.gguf");
  pack::pack_model(src, out);
  {
    auto m = Model::load(out);
    ASSERT_NE(m->packed(), nullptr);
    const pack::PackInfo& info = *m->packed();
    ASSERT_FALSE(info.layers.empty());
    EXPECT_EQ(info.layers[0].parts[0].type, Type::IQ4_XS);
    EXPECT_EQ(info.layers[0].parts[2].type, Type::IQ4_NL);
  }
  expect_identical_logits(src, out, kSynthPrompt);
  const pack::VerifySummary v = pack::verify_packed(out);
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
}

TEST(Pack, TinyMoeLogitsBitIdentical) {
  LES_REQUIRE_FILE(tiny_moe_path());
  TempDir d;
  const std::string out = d.file("tiny-moe.packed.gguf");
  // Pieces of ~1 MiB: each layer's experts (64 of 58-70 KiB) are written in 4-5 pieces.
  const pack::PackSummary sum = pack::pack_model(tiny_moe_path(), out, pack::PackOptions{.write_piece = 1 << 20});
  EXPECT_EQ(sum.layers, 8);
  EXPECT_EQ(sum.experts, 8 * 64);
  // Each expert is padded to whole 4 KiB pages (Q4_K gate/up with a Q8_0 or Q5_0 down: 17.5 or
  // 14.5 pages).
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  uint64_t padding = 0;
  for (int l = 0; l < 8; ++l) padding += 64 * ((4096 - m->expert_size(l) % 4096) % 4096);
  EXPECT_EQ(sum.padding_bytes, padding);
  EXPECT_GT(padding, 0u);
  expect_identical_logits(tiny_moe_path(), out, kTinyPrompt);
  EXPECT_TRUE(pack::verify_packed(out).ok());
}

TEST(Pack, OneReadPerExpertMiss) {
  TempDir d;
  const std::string src = synth_model(d);
  const std::string out = d.file("packed.gguf");
  pack::pack_model(src, out);
  for (const std::string& path : {src, out}) {
    const bool packed = path == out;
    auto m = Model::load(path, LoadOptions{.map_experts = false});
    ExpertLayout layout(*m, 4096);
    for (int l = 0; l < m->config().n_layer; ++l) {
      EXPECT_EQ(layout.one_extent(l), packed);
      EXPECT_EQ(layout.reads(l, 3).size(), packed ? 1u : 3u);
    }
    EXPECT_EQ(layout.has_checksums(), packed);
    if (packed) {
      // The read is the row's data rounded up to 4 KiB, at the row's aligned offset, landing at
      // the start of the slot; the views point into the slot at the parts' row offsets.
      const pack::PackedLayer& pl = *m->packed()->layer(2);
      const SlotRead r = layout.reads(2, 5)[0];
      EXPECT_EQ(r.file_offset, pl.file_offset + 5 * pl.stride);
      EXPECT_EQ(r.length, (pl.data_bytes + 4095) / 4096 * 4096);
      EXPECT_EQ(r.slot_offset, 0u);
      EXPECT_LE(layout.slot_bytes(), pl.stride);
      std::vector<uint8_t> slot(layout.slot_bytes());
      const ExpertView v = layout.view(2, 5, slot.data());
      EXPECT_EQ(v.gate.data, slot.data() + pl.parts[0].offset);
      EXPECT_EQ(v.up.data, slot.data() + pl.parts[1].offset);
      EXPECT_EQ(v.down.data, slot.data() + pl.parts[2].offset);
    }

    // Counted through the fake backend: ondemand never prefetches, so every op is a demand miss.
    auto log = std::make_shared<storage::FakeIoLog>();
    StreamingOptions o = stream_opts(*m, Schedule::ondemand, storage::IoMode::fake, 8);
    o.file = storage::make_memory_file(les::test::read_bytes(path), path, 4096);
    o.io.fake.log = log;
    StreamingExperts ex(*m, o);
    run_hashes(*m, &ex, kSynthPrompt, 4);
    const LayerStreamStats t = ex.stats().total();
    const uint64_t per_miss = packed ? 1 : 3;
    ASSERT_GT(t.misses, 0u);
    EXPECT_EQ(t.prefetch_issued, 0u);
    EXPECT_EQ(ex.stats().io.requests, t.misses);
    EXPECT_EQ(ex.stats().io.ops, per_miss * t.misses) << (packed ? "packed" : "original");
    EXPECT_EQ(ex.stats().io.syscalls, per_miss * t.misses) << "one read call per op (no short reads here)";
    EXPECT_EQ(log->started().size(), per_miss * t.misses);
    for (const auto& op : log->started()) {
      EXPECT_EQ(op.file_offset % 4096, 0u);
      EXPECT_EQ(op.length % 4096, 0u);
    }
  }
}

TEST(Pack, VerifyNamesAFlippedExpertByte) {
  TempDir d;
  const std::string src = synth_model(d);
  const std::string out = d.file("packed.gguf");
  pack::pack_model(src, out);
  const pack::PackInfo info = pack::read_pack_info(gguf::read_file(out), out);
  const pack::PackedLayer& pl = *info.layer(1);
  auto bytes = les::test::read_bytes(out);
  const std::string bad = d.file("bad.gguf");

  // A flipped data byte of layer 1, expert 5 (inside its down matrix).
  auto b1 = bytes;
  b1[pl.file_offset + 5 * pl.stride + pl.parts[2].offset + 17] ^= 0x40;
  write_bytes(bad, b1);
  pack::VerifySummary v = pack::verify_packed(bad);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].find("layer 1, expert 5: checksum mismatch"), std::string::npos) << v.problems[0];
  EXPECT_NO_THROW(Model::load(bad)) << "a bad checksum is a data fault, not a structural one";

  // A non-zero padding byte of layer 1, expert 9.
  auto b2 = bytes;
  b2[pl.file_offset + 9 * pl.stride + pl.data_bytes + 3] = 1;
  write_bytes(bad, b2);
  v = pack::verify_packed(bad);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].find("layer 1, expert 9: the"), std::string::npos) << v.problems[0];
  EXPECT_NE(v.problems[0].find("padding"), std::string::npos) << v.problems[0];

  // Not a packed file.
  EXPECT_NE(error_of([&] { pack::verify_packed(src); }).find("not a packed model"), std::string::npos);
}

TEST(Pack, VerifiedReadsReportCorruptionNeverWrongLogits) {
  TempDir d;
  const std::string src = synth_model(d);
  const std::string out = d.file("packed.gguf");
  pack::pack_model(src, out);
  auto m = Model::load(out, LoadOptions{.map_experts = false});
  const pack::PackedLayer& pl = *m->packed()->layer(1);
  auto bytes = les::test::read_bytes(out);
  for (int e = 0; e < 16; ++e) bytes[pl.file_offset + static_cast<uint64_t>(e) * pl.stride + 100] ^= 0x01;
  for (Schedule s : {Schedule::ondemand, Schedule::lookahead}) {
    StreamingOptions o = stream_opts(*m, s, storage::IoMode::fake, 16);
    o.file = storage::make_memory_file(bytes, "corrupt.gguf", 4096);
    o.verify_reads = true;
    StreamingExperts ex(*m, o);
    const std::string err = error_of([&] { run_hashes(*m, &ex, kSynthPrompt, 2); });
    EXPECT_NE(err.find("of layer 1 failed"), std::string::npos) << err;
    EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
    EXPECT_NE(err.find("corrupt.gguf"), std::string::npos) << err;
    EXPECT_NE(err.find("expert "), std::string::npos) << err;
  }
  // Checksums need a packed model.
  auto orig = Model::load(src, LoadOptions{.map_experts = false});
  StreamingOptions o = stream_opts(*orig, Schedule::ondemand, storage::IoMode::pread, 16);
  o.verify_reads = true;
  EXPECT_NE(error_of([&] { StreamingExperts ex(*orig, o); }).find("needs a packed model"), std::string::npos);
}

TEST(Pack, TruncatedOrInconsistentFilesFailToLoad) {
  TempDir d;
  const std::string src = synth_model(d);
  const std::string out = d.file("packed.gguf");
  pack::pack_model(src, out);
  const std::string bad = d.file("bad.gguf");

  // Truncated: the last packed rows are missing.
  auto bytes = les::test::read_bytes(out);
  ASSERT_GT(bytes.size(), 8192u);
  bytes.erase(bytes.end() - 4096, bytes.end());
  write_bytes(bad, bytes);
  for (const auto& load_mode : les::test::every_load_mode()) {
    // (no structured binding: clang 14 cannot capture one in a lambda)
    const std::string& mode = load_mode.first;
    const LoadOptions& lo = load_mode.second;
    const std::string err = error_of([&] { Model::load(bad, lo); });
    EXPECT_NE(err.find("bad.gguf"), std::string::npos) << mode << ": " << err;
    EXPECT_NE(err.find("ffn_experts_packed"), std::string::npos) << mode << ": " << err;
  }
  EXPECT_FALSE(error_of([&] { pack::verify_packed(bad); }).empty());

  struct Case {
    const char* what;
    std::function<void(std::vector<std::pair<std::string, gguf::Value>>&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"future version", [](auto& kv) { find_kv(kv, pack::kKeyVersion)->u64 = 99; }, "version 99 is not supported"},
      {"checksums missing",
       [](auto& kv) {
         std::erase_if(kv, [](const auto& p) { return p.first == pack::layer_key(2, "checksums"); });
       },
       "key 'les.pack.blk.2.checksums': missing"},
      {"too few checksums", [](auto& kv) { find_kv(kv, pack::layer_key(0, "checksums"))->arr.pop_back(); },
       "holds 15 checksums for 16 experts"},
      {"shape against the architecture (same bytes, so the row layout still adds up)",
       [](auto& kv) {
         auto& a = find_kv(kv, pack::layer_key(3, "gate.shape"))->arr;
         a[0].u64 = 512;
         a[1].u64 = 32;
       },
       "'blk.3.ffn_gate_exps.weight (packed in blk.3.ffn_experts_packed)' has shape [512, 32, 16], expected "
       "[256, 64, 16]"},
      {"row length against the type", [](auto& kv) { find_kv(kv, pack::layer_key(3, "up.shape"))->arr[0].u64 = 200; },
       "les.pack.blk.3.up.shape': row length 200 is not a multiple of q4_K's block size 256"},
      {"part offsets", [](auto& kv) { find_kv(kv, pack::layer_key(1, "down.offset"))->u64 += 32; },
       "les.pack.blk.1.down.offset"},
      {"wrong source name", [](auto& kv) { find_kv(kv, pack::layer_key(0, "gate.name"))->str = "blk.0.ffn_up_exps.weight"; },
       "expected 'blk.0.ffn_gate_exps.weight'"},
      {"layer not listed", [](auto& kv) { find_kv(kv, pack::kKeyLayers)->arr.pop_back(); },
       "'blk.3.ffn_experts_packed' is not listed"},
  };
  for (const Case& c : cases) {
    rewrite_kv(out, bad, c.edit);
    const std::string err = error_of([&] { Model::load(bad); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": " << err;
    EXPECT_NE(err.find("bad.gguf"), std::string::npos) << c.what << ": " << err;
  }
}

TEST(Pack, RefusesToOverwriteWithoutForce) {
  TempDir d;
  const std::string src = synth_model(d);
  const std::string out = d.file("packed.gguf");
  write_bytes(out, {1, 2, 3});
  const std::string err = error_of([&] { pack::pack_model(src, out); });
  EXPECT_NE(err.find("exists (use --force to overwrite)"), std::string::npos) << err;
  EXPECT_EQ(les::test::read_bytes(out), (std::vector<uint8_t>{1, 2, 3})) << "the existing file must be untouched";
  pack::pack_model(src, out, pack::PackOptions{.overwrite = true});
  EXPECT_TRUE(pack::verify_packed(out).ok());
  // Packing a packed file, or onto the source itself, is refused.
  EXPECT_NE(error_of([&] { pack::pack_model(out, d.file("again.gguf")); }).find("already packed"), std::string::npos);
  EXPECT_NE(error_of([&] { pack::pack_model(src, src, pack::PackOptions{.overwrite = true}); }).find("is the source"),
            std::string::npos);
  // A dense model has nothing to pack.
  synth::SynthSpec dense = synth::shape_spec("tiny", Arch::qwen3);
  synth::write_synth_model(dense, d.file("dense.gguf"));
  EXPECT_NE(error_of([&] { pack::pack_model(d.file("dense.gguf"), d.file("dense.packed.gguf")); })
                .find("nothing to pack"),
            std::string::npos);
  EXPECT_EQ(d.entries(), (std::vector<std::string>{"dense.gguf", "packed.gguf", "synth-tiny.gguf"}));
}

TEST(Pack, NoPartialOutputAfterAFailure) {
  TempDir d;
  const std::string src = synth_model(d);
  // Unwritable destination (a directory that does not exist).
  const std::string err = error_of([&] { pack::pack_model(src, d.file("no-such-dir/packed.gguf")); });
  EXPECT_NE(err.find("no-such-dir/packed.gguf"), std::string::npos) << err;

  // Failure in the middle of writing the data (here: the progress callback throws).
  TempDir out_dir;
  const std::string out = out_dir.file("packed.gguf");
  uint64_t calls = 0;
  EXPECT_THROW(pack::pack_model(src, out, {},
                                [&](uint64_t done, uint64_t total) {
                                  if (++calls > 3 && done > total / 2) throw les::Error("interrupted");
                                }),
               les::Error);
  EXPECT_TRUE(out_dir.entries().empty()) << "left behind: " << out_dir.entries()[0];

  // A full disk: the file size limit makes write() fail with EFBIG part-way through.
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 256 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  const std::string full = error_of([&] { pack::pack_model(src, out); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(full.find("packed.gguf"), std::string::npos) << full;
  EXPECT_TRUE(out_dir.entries().empty()) << "left behind: " << out_dir.entries()[0];
  // And afterwards the same call succeeds.
  pack::pack_model(src, out);
  EXPECT_EQ(out_dir.entries(), (std::vector<std::string>{"packed.gguf"}));
}
