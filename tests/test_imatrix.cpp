// Importance matrices: llama.cpp's GGUF and legacy forms (round trip, hand-made and corrupt files),
// the matmul input observer (every product, the right rows, logits unchanged), collection against a
// hand computation on synthetic models (routed rows per expert from the router's choices), the
// streaming and packed paths, the model match check, and agreement with llama-imatrix's own file.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "les/imatrix/collector.h"
#include "les/imatrix/imatrix.h"
#include "les/model/context.h"
#include "les/model/router.h"
#include "les/model/ops.h"
#include "les/pack/pack.h"
#include "les/sched/streaming_experts.h"
#include "les/tokenizer/tokenizer.h"
#include "greedy_hashes.h"
#include "model_edit.h"

using namespace les;
using les::test::error_of;
using les::test::ScopedDir;

namespace {

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// An importance matrix of varied values: 2-D entries and 3-D entries with some unused experts.
ImportanceMatrix varied_matrix(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> val(0.0f, 50.0f);
  ImportanceMatrix m;
  m.datasets = {"a.txt", "dir/b text.txt"};
  m.chunk_count = 7;
  m.chunk_size = 512;
  auto add = [&](const std::string& name, int64_t n_in, int64_t n_mat) {
    ImatrixEntry e;
    e.n_in = n_in;
    e.n_mat = n_mat;
    for (int64_t i = 0; i < n_in * n_mat; ++i) e.in_sum2.push_back(val(rng));
    for (int64_t k = 0; k < n_mat; ++k) e.counts.push_back(k % 5 == 3 ? 0.0f : static_cast<float>(rng() % 4000 + 1));
    m.entries[name] = e;
  };
  add("blk.0.attn_q.weight", 64, 1);
  add("blk.0.ffn_down_exps.weight", 32, 8);
  add("blk.1.ffn_gate_inp.weight", 64, 1);
  add("blk.1.ffn_up_exps.weight", 64, 8);
  add("output.weight", 64, 1);
  return m;
}

void expect_same(const ImportanceMatrix& a, const ImportanceMatrix& b) {
  EXPECT_EQ(a.datasets, b.datasets);
  EXPECT_EQ(a.chunk_count, b.chunk_count);
  EXPECT_EQ(a.chunk_size, b.chunk_size);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (const auto& [name, e] : a.entries) {
    const auto it = b.entries.find(name);
    ASSERT_NE(it, b.entries.end()) << name;
    EXPECT_EQ(e.n_in, it->second.n_in) << name;
    EXPECT_EQ(e.n_mat, it->second.n_mat) << name;
    EXPECT_EQ(e.in_sum2, it->second.in_sum2) << name;
    EXPECT_EQ(e.counts, it->second.counts) << name;
  }
}

// Little-endian bytes of a legacy .dat file, written by hand.
struct DatBytes {
  std::vector<uint8_t> b;
  void i32(int32_t v) { const auto* p = reinterpret_cast<const uint8_t*>(&v); b.insert(b.end(), p, p + 4); }
  void str(const std::string& s) { i32(static_cast<int32_t>(s.size())); b.insert(b.end(), s.begin(), s.end()); }
  void floats(const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    b.insert(b.end(), p, p + v.size() * sizeof(float));
  }
};

// Sums over rows of each column's square, in double.
std::vector<double> colsum2(const std::vector<float>& x, int64_t n_in) {
  std::vector<double> s(static_cast<size_t>(n_in), 0.0);
  for (size_t i = 0; i < x.size(); ++i) s[i % static_cast<size_t>(n_in)] += double(x[i]) * x[i];
  return s;
}

// |got - want| <= rel * |want| + abs for every element.
void expect_close(const float* got, const std::vector<double>& want, double rel, const std::string& what,
                  double abs = 1e-12) {
  double worst = 0;
  size_t at = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    const double err = std::fabs(got[j] - want[j]) / (std::fabs(want[j]) * rel + abs);
    if (err > worst) { worst = err; at = j; }
  }
  EXPECT_LE(worst, 1.0) << what << ": column " << at << " got " << got[at] << " want " << want[at];
}

// The LayerObserver's intermediates, concatenated over batches: (layer, name) -> rows.
using Intermediates = std::map<std::pair<int, std::string>, std::vector<float>>;
void record_intermediates(Context& ctx, Intermediates& out) {
  ctx.set_observer([&out](int layer, const char* name, const float* d, int64_t n, int64_t w) {
    auto& v = out[{layer, name}];
    v.insert(v.end(), d, d + n * w);
  });
}

std::vector<int32_t> random_tokens(int n, int vocab, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

std::vector<float> all_logits(const Context& ctx, int n_vocab) {
  std::vector<float> v;
  for (int i = 0; i < ctx.n_outputs(); ++i) v.insert(v.end(), ctx.logits(i), ctx.logits(i) + n_vocab);
  return v;
}

// Names of the model's matrices that a product reads, decided from the file alone: every tensor of
// two or more dimensions but the embeddings and the DeltaNet conv, plus the 1-D shared-expert gate.
std::set<std::string> product_tensors(const gguf::File& f, bool with_mtp, int n_layer) {
  std::set<std::string> s;
  for (const auto& t : f.tensors) {
    const bool matrix = t.ne.size() >= 2 || contains(t.name, "ffn_gate_inp_shexp");
    if (!matrix || t.name == "token_embd.weight" || contains(t.name, "embed_tokens") || contains(t.name, "conv1d")) {
      continue;
    }
    if (!with_mtp && contains(t.name, "blk." + std::to_string(n_layer) + ".")) continue;
    s.insert(t.name);
  }
  return s;
}

std::set<std::string> names_of(const ImportanceMatrix& m) {
  std::set<std::string> s;
  for (const auto& kv : m.entries) s.insert(kv.first);
  return s;
}

// Collects over `tokens` in batches of n_batch with `threads` threads.
ImportanceMatrix collect(const Model& model, const std::vector<int32_t>& tokens, int n_batch, int threads,
                         ImatrixCollectOptions opt, ExpertSource* src = nullptr) {
  Context ctx(model, ContextParams{.n_ctx = 64, .n_threads = threads, .n_batch = n_batch}, src);
  ImatrixCollector col(model.config().n_expert, opt);
  col.attach(ctx);
  ctx.eval(tokens, true);
  return col.result(static_cast<int>(tokens.size()), {"synthetic"});
}

}  // namespace

// --- file forms ---------------------------------------------------------------------------------

TEST(ImatrixFile, RoundTripKeepsValuesCountsAndKeys) {
  ScopedDir d;
  const ImportanceMatrix m = varied_matrix(3);
  write_imatrix(m, d.file("m.gguf"));
  const ImportanceMatrix r = read_imatrix(d.file("m.gguf"));
  EXPECT_FALSE(r.legacy);
  expect_same(m, r);

  // The layout llama.cpp writes: sorted names, NAME.in_sum2 [n_in(, n_mat)] then NAME.counts [1(, n_mat)], F32.
  const gguf::File f = gguf::read_file(d.file("m.gguf"));
  EXPECT_EQ(f.get_string("general.type"), "imatrix");
  EXPECT_EQ(f.get_int("imatrix.chunk_count"), 7);
  EXPECT_EQ(f.get_int("imatrix.chunk_size"), 512);
  EXPECT_EQ(f.get("imatrix.chunk_count").type, gguf::ValueType::UINT32);
  ASSERT_EQ(f.tensors.size(), 2 * m.entries.size());
  size_t i = 0;
  for (const auto& [name, e] : m.entries) {
    const gguf::TensorInfo& s = f.tensors[i++];
    const gguf::TensorInfo& c = f.tensors[i++];
    EXPECT_EQ(s.name, name + ".in_sum2");
    EXPECT_EQ(c.name, name + ".counts");
    EXPECT_EQ(s.type, Type::F32);
    EXPECT_EQ(c.type, Type::F32);
    EXPECT_EQ(s.ne, e.n_mat > 1 ? std::vector<int64_t>({e.n_in, e.n_mat}) : std::vector<int64_t>({e.n_in}));
    EXPECT_EQ(c.ne, e.n_mat > 1 ? std::vector<int64_t>({1, e.n_mat}) : std::vector<int64_t>({1}));
  }

  // Column weights are in_sum2 / count; an unused expert and an absent tensor have none.
  std::vector<float> scratch;
  const ImatrixEntry& up = m.entries.at("blk.1.ffn_up_exps.weight");
  const float* w = r.column_weights("blk.1.ffn_up_exps.weight", 2, scratch);
  ASSERT_NE(w, nullptr);
  for (int j = 0; j < 64; ++j) EXPECT_FLOAT_EQ(w[j], up.in_sum2[static_cast<size_t>(2 * 64 + j)] / up.counts[2]);
  EXPECT_EQ(r.column_weights("blk.1.ffn_up_exps.weight", 3, scratch), nullptr);  // count 0
  EXPECT_EQ(r.column_weights("blk.1.ffn_up_exps.weight", 8, scratch), nullptr);
  EXPECT_EQ(r.column_weights("blk.9.attn_q.weight", 0, scratch), nullptr);
  EXPECT_NE(r.column_weights("blk.0.attn_q.weight", 0, scratch), nullptr);
}

TEST(ImatrixFile, ReadsTheLegacyDatForm) {
  ScopedDir d;
  // Two entries: a 2-D tensor (ncall 3) and a flat 3-D stack of 2 experts x 8 columns (ncall 5), then
  // the chunk count and the dataset name.
  const std::vector<float> q = {1.5f, 3.0f, 4.5f, 6.0f};
  std::vector<float> up(16);
  for (size_t i = 0; i < up.size(); ++i) up[i] = 5.0f * static_cast<float>(i + 1);
  DatBytes b;
  b.i32(2);
  b.str("blk.0.attn_q.weight");
  b.i32(3);
  b.i32(4);
  b.floats(q);
  b.str("blk.0.ffn_up_exps.weight");
  b.i32(5);
  b.i32(16);
  b.floats(up);
  b.i32(12);
  b.str("wiki.train.raw");
  les::test::write_file_bytes(d.file("m.dat"), b.b.data(), b.b.size());

  ImportanceMatrix m = read_imatrix(d.file("m.dat"));
  EXPECT_TRUE(m.legacy);
  EXPECT_EQ(m.chunk_count, 12);
  EXPECT_EQ(m.datasets, std::vector<std::string>({"wiki.train.raw"}));
  ASSERT_EQ(m.entries.size(), 2u);
  std::vector<float> s;
  const float* w = m.column_weights("blk.0.attn_q.weight", 0, s);
  ASSERT_NE(w, nullptr);
  for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(w[j], q[static_cast<size_t>(j)] / 3);  // llama-quantize: value / ncall
  EXPECT_EQ(m.entries.at("blk.0.ffn_up_exps.weight").n_mat, 1);
  EXPECT_TRUE(contains(error_of([&] { m.column_weights("blk.0.ffn_up_exps.weight", 1, s); }), "fit_imatrix_to_model"));

  // Without its trailer the file still reads.
  DatBytes nb;
  nb.b.assign(b.b.begin(), b.b.end() - static_cast<long>(4 + 4 + std::string("wiki.train.raw").size()));
  les::test::write_file_bytes(d.file("short.dat"), nb.b.data(), nb.b.size());
  EXPECT_EQ(read_imatrix(d.file("short.dat")).entries.size(), 2u);

  // fit_imatrix_to_model splits the flat entry along a model whose stack is [8, n_out, 2].
  synth::SynthSpec spec = synth::shape_spec("tiny");
  spec.n_layer = 1;
  spec.n_embd = 8;
  spec.n_head = 1;
  spec.n_head_kv = 1;
  spec.head_dim = 8;
  spec.n_expert = 2;
  spec.n_expert_used = 1;
  spec.n_ff_exp = 8;
  spec.n_vocab = 259;
  spec.type = "f32";
  synth::write_synth_model(spec, d.file("model.gguf"));
  const gguf::File model = gguf::read_file(d.file("model.gguf"));
  fit_imatrix_to_model(m, model);
  const ImatrixEntry& e = m.entries.at("blk.0.ffn_up_exps.weight");
  EXPECT_EQ(e.n_in, 8);
  EXPECT_EQ(e.n_mat, 2);
  w = m.column_weights("blk.0.ffn_up_exps.weight", 1, s);
  ASSERT_NE(w, nullptr);
  for (int j = 0; j < 8; ++j) EXPECT_FLOAT_EQ(w[j], up[static_cast<size_t>(8 + j)] / 5);
}

TEST(ImatrixFile, CorruptAndForeignFilesGiveClearErrors) {
  ScopedDir d;
  const ImportanceMatrix m = varied_matrix(5);
  write_imatrix(m, d.file("good.gguf"));
  const std::vector<uint8_t> good = les::test::read_bytes(d.file("good.gguf"));
  ASSERT_FALSE(good.empty());

  EXPECT_TRUE(contains(error_of([&] { read_imatrix(d.file("absent.gguf")); }), "absent.gguf"));
  les::test::write_file_bytes(d.file("empty"), good.data(), 0);
  EXPECT_TRUE(contains(error_of([&] { read_imatrix(d.file("empty")); }), "not an importance matrix"));
  // Truncated in the data section and in the header.
  for (size_t cut : {good.size() - 100, good.size() / 2, size_t(40)}) {
    les::test::write_file_bytes(d.file("cut.gguf"), good.data(), cut);
    const std::string err = error_of([&] { read_imatrix(d.file("cut.gguf")); });
    EXPECT_TRUE(contains(err, "cut.gguf")) << cut << ": " << err;
  }
  // A model file is not an importance matrix.
  const std::string model = les::test::small_synth_model(d, "model.gguf");
  EXPECT_TRUE(contains(error_of([&] { read_imatrix(model); }), "no importance matrix data"));

  // Sums without counts; a non-F32 tensor; a non-finite sum; a negative count.
  auto write_with = [&](const std::function<void(gguf::Writer&)>& f) {
    gguf::Writer w;
    w.add_string("general.type", "imatrix");
    f(w);
    w.write(d.file("bad.gguf"));
    return error_of([&] { read_imatrix(d.file("bad.gguf")); });
  };
  const std::vector<float> four = {1, 2, 3, 4}, one = {1}, inf = {1, INFINITY, 3, 4}, neg = {-2};
  const std::vector<uint16_t> half = {0x3c00, 0x3c00, 0x3c00, 0x3c00};
  EXPECT_TRUE(contains(write_with([&](gguf::Writer& w) { w.add_tensor("x.weight.in_sum2", {4}, Type::F32, four.data()); }),
                       "no .counts tensor"));
  EXPECT_TRUE(contains(write_with([&](gguf::Writer& w) {
                         w.add_tensor("x.weight.in_sum2", {4}, Type::F16, half.data());
                         w.add_tensor("x.weight.counts", {1}, Type::F32, one.data());
                       }), "expected F32"));
  EXPECT_TRUE(contains(write_with([&](gguf::Writer& w) {
                         w.add_tensor("x.weight.in_sum2", {4}, Type::F32, inf.data());
                         w.add_tensor("x.weight.counts", {1}, Type::F32, one.data());
                       }), "not finite"));
  EXPECT_TRUE(contains(write_with([&](gguf::Writer& w) {
                         w.add_tensor("x.weight.in_sum2", {4}, Type::F32, four.data());
                         w.add_tensor("x.weight.counts", {1}, Type::F32, neg.data());
                       }), "must be finite and >= 0"));
  EXPECT_TRUE(contains(write_with([&](gguf::Writer& w) {
                         w.add_tensor("x.weight.in_sum2", {4}, Type::F32, four.data());
                         w.add_tensor("x.weight.counts", {3}, Type::F32, four.data());
                       }), "do not divide"));

  // Legacy form: truncated values, an absurd name length, trailing garbage.
  DatBytes b;
  b.i32(1);
  b.str("blk.0.attn_q.weight");
  b.i32(1);
  b.i32(4);
  b.floats(four);
  les::test::write_file_bytes(d.file("cut.dat"), b.b.data(), b.b.size() - 3);
  EXPECT_TRUE(contains(error_of([&] { read_imatrix(d.file("cut.dat")); }), "legacy imatrix truncated"));
  DatBytes big;
  big.i32(1);
  big.i32(1 << 30);
  big.b.resize(64, 0);
  les::test::write_file_bytes(d.file("name.dat"), big.b.data(), big.b.size());
  EXPECT_TRUE(contains(error_of([&] { read_imatrix(d.file("name.dat")); }), "name length"));
  DatBytes garbage = b;
  garbage.i32(3);
  garbage.i32(5);
  garbage.b.push_back('x');
  les::test::write_file_bytes(d.file("tail.dat"), garbage.b.data(), garbage.b.size());
  EXPECT_TRUE(contains(error_of([&] { read_imatrix(d.file("tail.dat")); }), "truncated"));
  // Random bytes are neither form.
  std::vector<uint8_t> noise(1000);
  std::mt19937 rng(1);
  for (auto& x : noise) x = static_cast<uint8_t>(rng());
  les::test::write_file_bytes(d.file("noise"), noise.data(), noise.size());
  EXPECT_FALSE(error_of([&] { read_imatrix(d.file("noise")); }).empty());

  // An unwritable destination.
  EXPECT_FALSE(error_of([&] { write_imatrix(m, d.file("no/such/dir/x.gguf")); }).empty());
}

TEST(ImatrixFile, ChunksFollowLlamaImatrix) {
  std::vector<int32_t> t(1030);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i);
  auto c = imatrix_chunks(t, 512, -1, -1);
  ASSERT_EQ(c.size(), 2u);  // the partial last window is dropped
  EXPECT_EQ(c[1][0], 512);
  EXPECT_EQ(c[1][511], 1023);
  c = imatrix_chunks(t, 100, 3, 7);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2][0], 7);  // BOS in front of every chunk
  EXPECT_EQ(c[2][1], 201);
  EXPECT_TRUE(contains(error_of([&] { imatrix_chunks(t, 2048, -1, -1); }), "fewer than one chunk"));
}

// --- collection ---------------------------------------------------------------------------------

// On an F32 qwen3moe model every statistic equals a direct computation from the observed
// intermediates: attention inputs, the router input, each expert's routed rows (from the router's
// own choices), the expert hidden rows entering ffn_down, the LM head; logits do not change.
TEST(ImatrixCollect, SyntheticMoeMatchesHandComputation) {
  ScopedDir d;
  const std::string path = les::test::small_synth_model(d, "m.gguf", "f32", 2);
  auto model = Model::load(path);
  const ModelConfig& c = model->config();
  const int n = 48;
  const std::vector<int32_t> tokens = random_tokens(n, c.n_vocab, 9);

  Context plain(*model, ContextParams{.n_ctx = 64, .n_threads = 1, .n_batch = 64});
  plain.eval(tokens, true);
  Context ctx(*model, ContextParams{.n_ctx = 64, .n_threads = 1, .n_batch = 64});
  Intermediates im;
  record_intermediates(ctx, im);
  ImatrixCollector col(c.n_expert, ImatrixCollectOptions{.process_output = true, .min_dense_rows = 1});
  col.attach(ctx);
  ctx.eval(tokens, true);
  EXPECT_EQ(all_logits(ctx, c.n_vocab), all_logits(plain, c.n_vocab)) << "the observer changed the logits";
  const ImportanceMatrix m = col.result(n, {"t"});
  EXPECT_EQ(m.chunk_count, 1);

  EXPECT_EQ(names_of(m), product_tensors(model->gguf(), false, c.n_layer));
  ASSERT_TRUE(m.entries.count("output.weight"));
  const int64_t E = c.n_embd, F = c.n_ff_exp;
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const std::vector<float>& attn_in = im.at({il, "attn_norm"});
    const std::vector<float>& ffn_in = im.at({il, "ffn_norm"});
    for (const char* t : {"attn_q", "attn_k", "attn_v"}) {
      const ImatrixEntry& e = m.entries.at(b + t + ".weight");
      EXPECT_EQ(e.counts, std::vector<float>({float(n)}));
      expect_close(e.in_sum2.data(), colsum2(attn_in, E), 1e-6, b + t);
    }
    expect_close(m.entries.at(b + "attn_output.weight").in_sum2.data(), colsum2(im.at({il, "kqv_out"}), c.n_q()),
                 1e-6, b + "attn_output");
    expect_close(m.entries.at(b + "ffn_gate_inp.weight").in_sum2.data(), colsum2(ffn_in, E), 1e-6, b + "router");

    // The router's choices, recomputed from its input as the forward pass does.
    const LayerWeights& L = model->weights().layers[static_cast<size_t>(il)];
    std::vector<float> logits(static_cast<size_t>(n * c.n_expert));
    QuantizedActs acts;
    matmul(L.router, ffn_in.data(), n, E, logits.data(), c.n_expert, ctx.pool(), acts);
    const RouterParams rp{c.n_expert, c.n_expert_used, c.norm_topk, c.expert_weights_scale};
    std::vector<std::vector<int>> rows_of(static_cast<size_t>(c.n_expert));
    for (int t = 0; t < n; ++t) {
      std::vector<int32_t> ids(static_cast<size_t>(c.n_expert_used));
      std::vector<float> w(ids.size());
      route_softmax_topk(rp, logits.data() + t * c.n_expert, ids.data(), w.data());
      for (int32_t e : ids) rows_of[static_cast<size_t>(e)].push_back(t);
    }
    const ImatrixEntry& gate = m.entries.at(b + "ffn_gate_exps.weight");
    const ImatrixEntry& up = m.entries.at(b + "ffn_up_exps.weight");
    const ImatrixEntry& down = m.entries.at(b + "ffn_down_exps.weight");
    ASSERT_EQ(gate.n_mat, c.n_expert);
    ASSERT_EQ(down.n_in, F);
    int used = 0;
    for (int e = 0; e < c.n_expert; ++e) {
      const std::vector<int>& rows = rows_of[static_cast<size_t>(e)];
      used += !rows.empty();
      EXPECT_EQ(gate.counts[static_cast<size_t>(e)], float(rows.size())) << b << " expert " << e;
      EXPECT_EQ(up.counts[static_cast<size_t>(e)], float(rows.size()));
      EXPECT_EQ(down.counts[static_cast<size_t>(e)], float(rows.size()));
      std::vector<double> want_in(static_cast<size_t>(E), 0.0), want_h(static_cast<size_t>(F), 0.0);
      const Matrix Wg = L.gate.expert(e), Wu = L.up.expert(e);
      for (int t : rows) {
        const float* x = ffn_in.data() + t * E;
        for (int64_t j = 0; j < E; ++j) want_in[static_cast<size_t>(j)] += double(x[j]) * x[j];
        for (int64_t r = 0; r < F; ++r) {  // the expert's hidden row: silu(gate . x) * (up . x)
          const float* g = reinterpret_cast<const float*>(Wg.row(r));
          const float* u = reinterpret_cast<const float*>(Wu.row(r));
          double gs = 0, us = 0;
          for (int64_t j = 0; j < E; ++j) { gs += double(g[j]) * x[j]; us += double(u[j]) * x[j]; }
          const double h = gs / (1 + std::exp(-gs)) * us;
          want_h[static_cast<size_t>(r)] += h * h;
        }
      }
      expect_close(gate.in_sum2.data() + e * E, want_in, 1e-6, b + "gate expert " + std::to_string(e));
      expect_close(up.in_sum2.data() + e * E, want_in, 1e-6, b + "up expert " + std::to_string(e));
      expect_close(down.in_sum2.data() + e * F, want_h, 1e-4, b + "down expert " + std::to_string(e), 1e-9);
    }
    EXPECT_GE(used, 3) << "routing should spread over the experts";
  }
  expect_close(m.entries.at("output.weight").in_sum2.data(), colsum2(im.at({-1, "result_norm"}), E), 1e-6, "output");
  EXPECT_EQ(m.entries.at("output.weight").counts[0], float(n));
}

// Batch size and thread count change nothing; llama-imatrix's filters: dense products of fewer than
// 16 rows and the LM head (unless asked for) are skipped, routed experts never are.
TEST(ImatrixCollect, BatchesThreadsAndLlamaFilters) {
  ScopedDir d;
  const std::string path = les::test::small_synth_model(d, "m.gguf", "q8_0", 2);
  auto model = Model::load(path);
  const std::vector<int32_t> tokens = random_tokens(40, model->config().n_vocab, 4);
  const ImatrixCollectOptions all{.process_output = true, .min_dense_rows = 1};
  const ImportanceMatrix a = collect(*model, tokens, 64, 1, all);
  const ImportanceMatrix b = collect(*model, tokens, 7, 2, all);
  expect_same(a, b);

  const ImportanceMatrix dflt = collect(*model, tokens, 64, 2, {});
  EXPECT_EQ(dflt.entries.count("output.weight"), 0u);
  EXPECT_EQ(dflt.entries.size(), a.entries.size() - 1);
  const ImportanceMatrix small = collect(*model, tokens, 8, 1, {});
  for (const auto& [name, e] : small.entries) EXPECT_TRUE(contains(name, "_exps.weight")) << name;
  EXPECT_EQ(small.entries.size(), 3u * 2);
  expect_same(ImportanceMatrix{{{"blk.0.ffn_down_exps.weight", small.entries.at("blk.0.ffn_down_exps.weight")}}, {}, 0, 0},
              ImportanceMatrix{{{"blk.0.ffn_down_exps.weight", a.entries.at("blk.0.ffn_down_exps.weight")}}, {}, 0, 0});
}

// qwen35moe: DeltaNet and gated-attention projections, router, experts, shared expert and its gate,
// the LM head and, in mtp_eval, the MTP block and head; logits (trunk and MTP) do not change.
TEST(ImatrixCollect, Qwen35MoeCoversEveryProductIncludingMtp) {
  ScopedDir d;
  synth::SynthSpec s = synth::shape_spec("qwen35-tiny");
  s.full_attn_interval = 2;
  s.type = "f32";
  s.n_mtp = 1;
  s.seed = 5;
  synth::write_synth_model(s, d.file("q.gguf"));
  auto model = Model::load(d.file("q.gguf"));
  const ModelConfig& c = model->config();
  const int n = 24;
  const std::vector<int32_t> tokens = random_tokens(n, c.n_vocab, 2);

  Context plain(*model, ContextParams{.n_ctx = 64, .n_threads = 1});
  plain.eval(tokens, true);
  plain.mtp_eval(std::span<const int32_t>(tokens.data(), 4), plain.hidden(0));
  Context ctx(*model, ContextParams{.n_ctx = 64, .n_threads = 2});
  Intermediates im;
  record_intermediates(ctx, im);
  std::set<std::string> seen;
  std::map<std::string, int64_t> width;
  ImatrixCollector col(c.n_expert, ImatrixCollectOptions{.process_output = true, .min_dense_rows = 1});
  ctx.set_matmul_observer([&](const std::string& t, int e, const float* x, int64_t rows, int64_t n_in) {
    seen.insert(t);
    width[t] = n_in;
    col.add(t, e, x, rows, n_in);
  });
  ctx.eval(tokens, true);
  EXPECT_EQ(all_logits(ctx, c.n_vocab), all_logits(plain, c.n_vocab));
  EXPECT_EQ(seen, product_tensors(model->gguf(), false, c.n_layer));
  const ImportanceMatrix m = col.result(n, {});
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const std::vector<double> want = colsum2(im.at({il, "attn_norm"}), c.n_embd);
    const std::vector<std::string> proj =
        c.is_recurrent(il) ? std::vector<std::string>{"attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha"}
                           : std::vector<std::string>{"attn_q", "attn_k", "attn_v"};
    for (const std::string& p : proj) expect_close(m.entries.at(b + p + ".weight").in_sum2.data(), want, 1e-6, b + p);
    const std::vector<double> ffn = colsum2(im.at({il, "ffn_norm"}), c.n_embd);
    for (const char* p : {"ffn_gate_inp", "ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp"}) {
      expect_close(m.entries.at(b + p + ".weight").in_sum2.data(), ffn, 1e-6, b + p);
      EXPECT_EQ(m.entries.at(b + p + ".weight").counts[0], float(n));
    }
    EXPECT_EQ(width.at(b + "ffn_down_shexp.weight"), c.n_ff_shexp);
    if (c.is_recurrent(il)) {
      EXPECT_EQ(width.at(b + "ssm_out.weight"), c.ssm_value_dim());
    }
    float routed = 0;
    for (float x : m.entries.at(b + "ffn_down_exps.weight").counts) routed += x;
    EXPECT_EQ(routed, float(n * c.n_expert_used));
  }
  EXPECT_NO_THROW(check_imatrix_matches(m, model->gguf()));  // the MTP block needs no data

  // The MTP head reports its block (blk.N) and its own products.
  seen.clear();
  ctx.mtp_eval(std::span<const int32_t>(tokens.data(), 4), ctx.hidden(0));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(0, std::memcmp(ctx.mtp_logits(i), plain.mtp_logits(i), sizeof(float) * static_cast<size_t>(c.n_vocab)));
  }
  std::set<std::string> want_mtp;
  for (const std::string& t : product_tensors(model->gguf(), true, c.n_layer)) {
    if (contains(t, "blk." + std::to_string(c.n_layer) + ".")) want_mtp.insert(t);
  }
  const bool own_head = model->gguf().find_tensor("blk." + std::to_string(c.n_layer) + ".nextn.shared_head_head.weight");
  if (!own_head) want_mtp.insert(model->gguf().find_tensor("output.weight") ? "output.weight" : "token_embd.weight");
  EXPECT_EQ(seen, want_mtp);
  EXPECT_TRUE(want_mtp.count("blk." + std::to_string(c.n_layer) + ".nextn.eh_proj.weight"));
  // With the MTP block's entries the matrix still matches the model.
  EXPECT_NO_THROW(check_imatrix_matches(col.result(n, {}), model->gguf()));
  EXPECT_GT(col.result(n, {}).entries.size(), m.entries.size());
}

// A dense FFN reports ffn_{gate,up,down}.weight as plain matrices (expert -1).
TEST(ImatrixCollect, DenseFfnIsNotAnExpertStack) {
  ScopedDir d;
  synth::SynthSpec s = synth::shape_spec("tiny", Arch::qwen3);
  s.n_layer = 2;
  s.type = "q8_0";
  synth::write_synth_model(s, d.file("dense.gguf"));
  auto model = Model::load(d.file("dense.gguf"));
  Context ctx(*model, ContextParams{.n_ctx = 64, .n_threads = 1});
  std::set<int> experts;
  std::set<std::string> seen;
  ctx.set_matmul_observer([&](const std::string& t, int e, const float*, int64_t, int64_t) {
    experts.insert(e);
    seen.insert(t);
  });
  ctx.eval(random_tokens(20, model->config().n_vocab, 1), false);
  EXPECT_EQ(experts, std::set<int>({-1}));
  EXPECT_TRUE(seen.count("blk.1.ffn_down.weight"));
  EXPECT_EQ(seen, product_tensors(model->gguf(), false, 2));
  const ImportanceMatrix m = collect(*model, random_tokens(20, model->config().n_vocab, 1), 64, 1, {});
  EXPECT_EQ(m.entries.at("blk.0.ffn_up.weight").n_mat, 1);
  EXPECT_EQ(m.entries.at("blk.0.ffn_up.weight").counts[0], 20.0f);
  EXPECT_NO_THROW(check_imatrix_matches(m, model->gguf()));
}

// Experts streamed through a small cache and a packed file give the resident model's matrix exactly.
TEST(ImatrixCollect, StreamedAndPackedEqualResident) {
  ScopedDir d;
  const std::string path = les::test::small_synth_model(d, "m.gguf", "q8_0", 3);
  pack::pack_model(path, d.file("packed.gguf"));
  auto resident = Model::load(path);
  auto packed = Model::load(d.file("packed.gguf"));
  const std::vector<int32_t> tokens = random_tokens(36, resident->config().n_vocab, 8);
  const ImatrixCollectOptions o{.process_output = true, .min_dense_rows = 1};
  const ImportanceMatrix ref = collect(*resident, tokens, 5, 1, o);
  expect_same(ref, collect(*packed, tokens, 5, 2, o));
  for (const auto* p : {&path, static_cast<const std::string*>(nullptr)}) {
    auto streamed = Model::load(p ? *p : d.file("packed.gguf"), LoadOptions{.map_experts = false});
    StreamingExperts ex(*streamed, les::test::stream_opts(*streamed, Schedule::lookahead, storage::IoMode::pread, 3));
    expect_same(ref, collect(*streamed, tokens, 5, 2, o, &ex));
    EXPECT_GT(ex.stats().total().misses, 0u);
  }
  EXPECT_NO_THROW(check_imatrix_matches(ref, packed->gguf()));
  // A round trip through the file form keeps it matching.
  write_imatrix(ref, d.file("imatrix.gguf"));
  EXPECT_NO_THROW(check_imatrix_matches(read_imatrix(d.file("imatrix.gguf")), resident->gguf()));
}

// --- match check and merging --------------------------------------------------------------------

TEST(ImatrixCheck, RejectsAMatrixMadeForAnotherModel) {
  ScopedDir d;
  const std::string a = les::test::small_synth_model(d, "a.gguf", "q8_0", 2);
  const std::string b = les::test::small_synth_model(d, "b.gguf", "q8_0", 3);
  synth::SynthSpec wide = synth::shape_spec("tiny");
  wide.n_layer = 2;
  wide.n_vocab = 259;
  synth::write_synth_model(wide, d.file("wide.gguf"));
  auto ma = Model::load(a);
  const ImportanceMatrix m = collect(*ma, random_tokens(32, 259, 3), 64, 1, {});
  const gguf::File fa = gguf::read_file(a), fb = gguf::read_file(b), fw = gguf::read_file(d.file("wide.gguf"));
  EXPECT_NO_THROW(check_imatrix_matches(m, fa));

  // Other widths: the first entry names its tensor and both shapes.
  std::string err = error_of([&] { check_imatrix_matches(m, fw); });
  EXPECT_TRUE(contains(err, "blk.0.attn_k.weight") && contains(err, "another model")) << err;
  // A deeper model: layer 2 has no data.
  err = error_of([&] { check_imatrix_matches(m, fb); });
  EXPECT_TRUE(contains(err, "no entry") && contains(err, "blk.2.")) << err;
  // An entry the model does not have; a missing entry; a 2-D entry for a 3-D tensor.
  ImportanceMatrix extra = m;
  extra.entries["blk.0.attn_qkv.weight"] = m.entries.at("blk.0.attn_q.weight");
  EXPECT_TRUE(contains(error_of([&] { check_imatrix_matches(extra, fa); }), "blk.0.attn_qkv.weight"));
  ImportanceMatrix missing = m;
  missing.entries.erase("blk.1.ffn_up_exps.weight");
  EXPECT_TRUE(contains(error_of([&] { check_imatrix_matches(missing, fa); }), "'blk.1.ffn_up_exps.weight'"));
  // A flat stack (one matrix of n_expert x n_in values, as llama-imatrix writes after reading a legacy
  // file) is accepted, as llama-quantize does, and fit_imatrix_to_model splits it; a flat entry of
  // another size is not.
  ImportanceMatrix flat = m;
  ImatrixEntry& e = flat.entries.at("blk.0.ffn_gate_exps.weight");
  const int64_t n_expert = e.n_mat;
  e.n_in *= e.n_mat;
  e.n_mat = 1;
  e.counts.assign(1, 100.0f);
  EXPECT_NO_THROW(check_imatrix_matches(flat, fa));
  std::vector<float> s;
  EXPECT_TRUE(contains(error_of([&] { flat.column_weights("blk.0.ffn_gate_exps.weight", 1, s); }), "fit_imatrix_to_model"));
  fit_imatrix_to_model(flat, fa);
  EXPECT_EQ(flat.entries.at("blk.0.ffn_gate_exps.weight").n_mat, n_expert);
  EXPECT_EQ(flat.entries.at("blk.0.ffn_gate_exps.weight").counts, std::vector<float>(size_t(n_expert), 100.0f));
  const float* w = flat.column_weights("blk.0.ffn_gate_exps.weight", 1, s);
  ASSERT_NE(w, nullptr);
  EXPECT_FLOAT_EQ(w[3], m.entries.at("blk.0.ffn_gate_exps.weight").in_sum2[32 + 3] / 100.0f);
  ImportanceMatrix short_flat = m;
  ImatrixEntry& sf = short_flat.entries.at("blk.1.ffn_up_exps.weight");
  sf.n_in = sf.n_in * sf.n_mat - 32;
  sf.n_mat = 1;
  sf.in_sum2.resize(static_cast<size_t>(sf.n_in));
  sf.counts.resize(1);
  EXPECT_TRUE(contains(error_of([&] { check_imatrix_matches(short_flat, fa); }), "blk.1.ffn_up_exps.weight"));
}

TEST(ImatrixCollect, MergeAddsFilesLikeLlamaImatrix) {
  ScopedDir d;
  const std::string path = les::test::small_synth_model(d, "m.gguf", "q8_0", 2);
  auto model = Model::load(path);
  const std::vector<int32_t> t1 = random_tokens(32, 259, 1), t2 = random_tokens(32, 259, 2);
  const ImportanceMatrix a = collect(*model, t1, 64, 1, {});
  const ImportanceMatrix b = collect(*model, t2, 64, 1, {});
  ImatrixCollector both(model->config().n_expert);
  both.merge(a, 32);
  both.merge(b, 32);
  const ImportanceMatrix m = both.result(32, {"x"});
  EXPECT_EQ(m.chunk_count, 2);  // largest count / chunk size
  for (const auto& [name, e] : m.entries) {
    for (size_t i = 0; i < e.counts.size(); ++i) {
      EXPECT_EQ(e.counts[i], a.entries.at(name).counts[i] + b.entries.at(name).counts[i]);
    }
    for (size_t i = 0; i < e.in_sum2.size(); ++i) {
      EXPECT_NEAR(e.in_sum2[i], a.entries.at(name).in_sum2[i] + b.entries.at(name).in_sum2[i], 1e-5 * (1 + e.in_sum2[i]));
    }
  }
  // A legacy matrix (means x calls) is scaled by the chunk size; a wrong shape is an error.
  ImportanceMatrix legacy;
  legacy.legacy = true;
  legacy.entries["blk.0.attn_q.weight"] = ImatrixEntry{32, 1, std::vector<float>(32, 6.0f), {3.0f}};
  ImatrixCollector c2(model->config().n_expert);
  c2.merge(legacy, 512);
  const ImportanceMatrix merged = c2.result(512, {});
  const ImatrixEntry& q = merged.entries.at("blk.0.attn_q.weight");
  EXPECT_EQ(q.counts[0], 3.0f * 512);
  EXPECT_EQ(q.in_sum2[0], 6.0f * 512);
  legacy.entries["blk.0.attn_q.weight"].n_in = 16;
  legacy.entries["blk.0.attn_q.weight"].in_sum2.resize(16);
  EXPECT_TRUE(contains(error_of([&] { c2.merge(legacy, 512); }), "blk.0.attn_q.weight"));
}

// --- agreement with llama.cpp -------------------------------------------------------------------

// tests/data/tiny-moe-q4_k_m.imatrix-4x512.gguf is llama-imatrix's output for the first 4 chunks of 512
// tokens of tiny-moe-val.txt on the bundled Q4_K_M model (tests/data/README.md has the command). les
// collects the same chunks: the same entries and shapes, identical dense counts, the same column
// sums to rounding. Expert counts move where the two programs route a token differently: both
// quantize every activation to 8 bits before a Q4_K/Q6_K product, their float sums differ in order,
// and where one value lands on the other 8-bit level the difference grows along the sequence
// (measured: 134 of 65,536 expert selections, 0.2%; a wrong count or row would move thousands).
TEST(ImatrixLlamaAgreement, TinyMoeMatchesLlamaImatrixFile) {
  const std::string ref_path = les::test::source_dir() + "/tests/data/tiny-moe-q4_k_m.imatrix-4x512.gguf";
  const ImportanceMatrix ref = read_imatrix(ref_path);
  // The file's form, as llama.cpp wrote it.
  const gguf::File f = gguf::read_file(ref_path);
  EXPECT_EQ(f.get_string("general.type"), "imatrix");
  EXPECT_EQ(ref.chunk_count, 4);
  EXPECT_EQ(ref.chunk_size, 512);
  EXPECT_EQ(ref.datasets, std::vector<std::string>({"tiny-moe-val.txt"}));
  EXPECT_EQ(ref.entries.size(), 8u * 8 + 1);
  const ImatrixEntry& q0 = ref.entries.at("blk.0.attn_q.weight");
  EXPECT_EQ(q0.n_in, 256);
  EXPECT_EQ(q0.counts, std::vector<float>({2048.0f}));
  EXPECT_EQ(ref.entries.at("blk.7.ffn_down_exps.weight").n_mat, 64);
  EXPECT_EQ(ref.entries.at("blk.7.ffn_down_exps.weight").n_in, 128);
  EXPECT_EQ(f.find_tensor("blk.7.ffn_down_exps.weight.counts")->ne, std::vector<int64_t>({1, 64}));
  EXPECT_EQ(f.find_tensor("blk.7.ffn_down_exps.weight.in_sum2")->ne, std::vector<int64_t>({128, 64}));
  EXPECT_EQ(f.find_tensor("output.weight.in_sum2")->ne, std::vector<int64_t>({256}));

  const std::string model_path = les::test::tiny_moe_path();
  const std::string text_path = les::test::tiny_val_text_path();
  LES_REQUIRE_FILE(model_path);
  LES_REQUIRE_FILE(text_path);
  auto model = Model::load(model_path);
  const ModelConfig& c = model->config();
  EXPECT_NO_THROW(check_imatrix_matches(ref, model->gguf()));
  const std::vector<uint8_t> bytes = les::test::read_bytes(text_path);
  const Tokenizer tok(vocab_from_gguf(model->gguf()));
  const std::vector<int32_t> tokens =
      tok.encode(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), true, false);
  const auto chunks = imatrix_chunks(tokens, 512, 4, tok.add_bos() ? tok.bos() : -1);
  ASSERT_EQ(chunks.size(), 4u);
  Context ctx(*model, ContextParams{.n_ctx = 512, .n_threads = 2, .n_batch = 512});
  ImatrixCollector col(c.n_expert, ImatrixCollectOptions{.process_output = true});
  col.attach(ctx);
  for (const auto& ch : chunks) {
    ctx.rollback(0);
    ctx.eval(ch, true);
  }
  const ImportanceMatrix les_m = col.result(512, {"tiny-moe-val.txt"});
  EXPECT_EQ(names_of(les_m), names_of(ref));
  EXPECT_EQ(les_m.chunk_count, ref.chunk_count);

  int64_t mats = 0, count_diff = 0, rows_moved = 0, n_rel = 0;
  double max_rel = 0, sum_rel = 0;
  std::string worst;
  for (const auto& [name, r] : ref.entries) {
    const ImatrixEntry& l = les_m.entries.at(name);
    ASSERT_EQ(l.n_in, r.n_in) << name;
    ASSERT_EQ(l.n_mat, r.n_mat) << name;
    for (int64_t k = 0; k < r.n_mat; ++k) {
      ++mats;
      const float cr = r.counts[static_cast<size_t>(k)], cl = l.counts[static_cast<size_t>(k)];
      if (cr != cl) {
        ++count_diff;
        rows_moved += static_cast<int64_t>(std::fabs(cr - cl));
        ASSERT_EQ(r.n_mat, c.n_expert) << name << ": a dense count differs";
        continue;
      }
      if (cr == 0) continue;
      // Column sums relative to the matrix's largest (tiny columns carry no weight).
      float scale = 0;
      for (int64_t j = 0; j < r.n_in; ++j) scale = std::max(scale, r.in_sum2[static_cast<size_t>(k * r.n_in + j)]);
      for (int64_t j = 0; j < r.n_in; ++j) {
        const size_t i = static_cast<size_t>(k * r.n_in + j);
        const double rel = std::fabs(double(l.in_sum2[i]) - r.in_sum2[i]) / scale;
        sum_rel += rel;
        ++n_rel;
        if (rel > max_rel) {
          max_rel = rel;
          worst = name + " matrix " + std::to_string(k) + " column " + std::to_string(j);
        }
      }
    }
  }
  const double mean_rel = sum_rel / static_cast<double>(n_rel);
  // Rows moved, summed over the gate, up and down matrices of every layer: 3 per changed selection.
  const int64_t selections = 2048 * static_cast<int64_t>(c.n_layer) * c.n_expert_used;
  std::printf("les vs llama-imatrix: %lld of %lld matrices with other counts (%lld rows moved of %lld expert "
              "selections x 3); values: max rel diff %.3g (%s), mean %.3g\n",
              static_cast<long long>(count_diff), static_cast<long long>(mats), static_cast<long long>(rows_moved),
              static_cast<long long>(selections), max_rel, worst.c_str(), mean_rel);
  EXPECT_LE(rows_moved, 3 * selections / 100) << "more than 1% of the expert selections differ";
  EXPECT_LE(max_rel, 5e-2);
  EXPECT_LE(mean_rel, 1e-4);
}
