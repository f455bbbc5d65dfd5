// llama.cpp decode speed at a given KV depth, with the cache filled synthetically (les issue 40: the
// long-context target). Filling a 32k context by a real prefill costs tens of minutes on a 2-core
// machine, yet a decode step's cost depends on how many positions the cache holds, not on what they
// hold. So: prefill m real tokens (fixed pseudo-random ids), read the sequence state
// (llama_state_seq_get_data), build a state of D cells at positions 0..D-1 whose K/V rows repeat the
// m real rows cyclically, load it (llama_state_seq_set_data), and time decode steps at positions
// D, D+1, ... . --fill real fills the D positions by a real prefill instead (to check that both fills
// decode at the same speed at a small D).
//
// The sequence state's layout (llama.cpp src/llama-context.cpp state_seq_get_data and
// src/llama-kv-cache.cpp state_write / state_write_meta / state_write_data):
//   u32 magic, i32 seq_id,
//   u32 n_stream, then per stream: u32 cell_count; if cell_count > 0:
//     cell_count x (i32 pos, u32 n_seq_id, [llama_kv_cell_ext (12 bytes) when the cache keeps cell
//                   ext data: M-RoPE or PLE models], n_seq_id x i32 seq_id)
//     u32 v_trans, u32 n_layer,
//     n_layer x (i32 k_type, u64 k_row_size, cell_count rows of K)
//     v_trans == 0: per layer with V: (i32 v_type, u64 v_row_size, cell_count rows of V)
//     v_trans == 1: per layer with V: (i32 v_type, u32 v_el_size, u32 n_embd_v_gqa,
//                                      n_embd_v_gqa x (cell_count elements))
// With flash attention on (always here) V is not transposed; the transposed layout is handled too.
//
// usage: depth_bench -m MODEL [-t THREADS] --depth D [-n N] [--ctk TYPE] [--ctv TYPE] [--reps R]
//                    [--prefill m] [--fill synthetic|real] [--warmup W] [--seed S] [--json FILE] [-v]
// Output: a human-readable summary, and one line starting "json: " (also written to --json FILE).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "ggml.h"
#include "llama.h"

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "depth_bench: %s\n", msg.c_str());
  std::exit(1);
}

bool g_verbose = false;
void log_cb(ggml_log_level level, const char* text, void*) {
  if (g_verbose || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

ggml_type parse_type(const std::string& name) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name(static_cast<ggml_type>(t));
    if (n && strcasecmp(n, name.c_str()) == 0) return static_cast<ggml_type>(t);
  }
  die("unknown KV type '" + name + "' (f16, bf16, f32, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)");
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// CPU-seconds all CPUs spent busy (from /proc/stat), and this process's own CPU-seconds: their
// difference over a timed span is what other processes took meanwhile (a shared machine's noise).
double machine_busy_s() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  f >> cpu;
  std::vector<double> v;
  double x;
  for (int i = 0; i < 8 && f >> x; ++i) v.push_back(x);
  if (v.size() < 5) return 0;
  double busy = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (i != 3 && i != 4) busy += v[i];  // all but idle and iowait
  return busy / static_cast<double>(sysconf(_SC_CLK_TCK));
}
double own_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// A bounds-checked reader over a state buffer.
struct Reader {
  const uint8_t* p;
  size_t n, off = 0;
  const uint8_t* take(size_t k) {
    if (off + k > n) throw std::runtime_error("state truncated");
    const uint8_t* r = p + off;
    off += k;
    return r;
  }
  template <class T> T get() {
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
};

struct Writer {
  std::vector<uint8_t> buf;
  void put(const void* src, size_t k) {
    const auto* s = static_cast<const uint8_t*>(src);
    buf.insert(buf.end(), s, s + k);
  }
  template <class T> void put(T v) { put(&v, sizeof(T)); }
};

// One tensor block of the state: K or V of one layer.
struct Block {
  int32_t type;
  uint64_t row_size;       // non-transposed: bytes per cell; transposed: element size
  uint32_t n_embd = 0;     // transposed only
  const uint8_t* data;     // cell_count rows (or n_embd x cell_count elements when transposed)
};

// The parsed state of one sequence: one non-empty stream.
struct SeqState {
  uint32_t magic;
  int32_t seq_id;
  uint32_t n_stream;
  uint32_t stream;                    // the index of the non-empty stream
  uint32_t cell_count;
  size_t ext_size;                    // bytes of llama_kv_cell_ext per cell (0 or 12)
  std::vector<int32_t> pos;
  std::vector<const uint8_t*> ext;    // per cell, ext_size bytes
  std::vector<int32_t> cell_seq;      // per cell, the one seq id
  uint32_t v_trans, n_layer;
  std::vector<Block> k, v;
};

bool try_parse(const std::vector<uint8_t>& buf, size_t ext_size, int n_layer_model, SeqState& s) {
  try {
    Reader r{buf.data(), buf.size()};
    s = SeqState{};
    s.ext_size = ext_size;
    s.magic = r.get<uint32_t>();
    s.seq_id = r.get<int32_t>();
    s.n_stream = r.get<uint32_t>();
    bool found = false;
    for (uint32_t st = 0; st < s.n_stream; ++st) {
      const uint32_t cc = r.get<uint32_t>();
      if (cc == 0) continue;
      if (found) return false;  // more than one non-empty stream: not one sequence
      found = true;
      s.stream = st;
      s.cell_count = cc;
      for (uint32_t i = 0; i < cc; ++i) {
        s.pos.push_back(r.get<int32_t>());
        const uint32_t nseq = r.get<uint32_t>();
        if (nseq != 1) return false;
        s.ext.push_back(r.take(ext_size));
        s.cell_seq.push_back(r.get<int32_t>());
      }
      s.v_trans = r.get<uint32_t>();
      s.n_layer = r.get<uint32_t>();
      if (s.v_trans > 1 || s.n_layer == 0 || static_cast<int>(s.n_layer) > n_layer_model) return false;
      for (uint32_t l = 0; l < s.n_layer; ++l) {
        Block b;
        b.type = r.get<int32_t>();
        b.row_size = r.get<uint64_t>();
        if (b.type < 0 || b.type >= GGML_TYPE_COUNT || b.row_size == 0 || b.row_size > (1u << 24)) return false;
        b.data = r.take(b.row_size * cc);
        s.k.push_back(b);
      }
      // V blocks: one per layer that has V (all of them for this tool's models); read until the end.
      while (r.off < r.n && s.v.size() < s.n_layer) {
        Block b;
        b.type = r.get<int32_t>();
        if (b.type < 0 || b.type >= GGML_TYPE_COUNT) return false;
        if (!s.v_trans) {
          b.row_size = r.get<uint64_t>();
          if (b.row_size == 0 || b.row_size > (1u << 24)) return false;
          b.data = r.take(b.row_size * cc);
        } else {
          b.row_size = r.get<uint32_t>();
          b.n_embd = r.get<uint32_t>();
          if (b.row_size == 0 || b.row_size > 16 || b.n_embd == 0) return false;
          b.data = r.take(b.row_size * b.n_embd * cc);
        }
        s.v.push_back(b);
      }
      // Only one stream is non-empty for one sequence; later streams have cell_count 0, but they come
      // after this stream's data, so read them here.
      for (uint32_t st2 = st + 1; st2 < s.n_stream; ++st2)
        if (r.get<uint32_t>() != 0) return false;
      break;
    }
    return found && r.off == r.n;
  } catch (const std::exception&) {
    return false;
  }
}

SeqState parse_state(const std::vector<uint8_t>& buf, int n_layer_model) {
  SeqState s;
  for (size_t ext : {size_t(0), size_t(12)})
    if (try_parse(buf, ext, n_layer_model, s)) return s;
  die("cannot parse the sequence state (a layout this tool does not know: hybrid/recurrent memory, or "
      "several streams)");
}

// A state of D cells at positions 0..D-1 whose cell i holds the rows of source cell i mod m.
std::vector<uint8_t> expand_state(const SeqState& s, uint32_t D) {
  const uint32_t m = s.cell_count;
  Writer w;
  w.buf.reserve(64 + size_t(D) * (16 + s.ext_size) +
                [&] {
                  size_t per = 0;
                  for (const auto& b : s.k) per += b.row_size;
                  for (const auto& b : s.v) per += s.v_trans ? b.row_size * b.n_embd : b.row_size;
                  return per * D + 32 * (s.k.size() + s.v.size());
                }());
  w.put(s.magic);
  w.put(s.seq_id);
  w.put(s.n_stream);
  for (uint32_t st = 0; st < s.n_stream; ++st) {
    if (st != s.stream) {
      w.put(uint32_t(0));
      continue;
    }
    w.put(D);
    for (uint32_t i = 0; i < D; ++i) {
      w.put(int32_t(i));
      w.put(uint32_t(1));
      w.put(s.ext[i % m], s.ext_size);
      w.put(s.cell_seq[i % m]);
    }
    w.put(s.v_trans);
    w.put(s.n_layer);
    for (const auto& b : s.k) {
      w.put(b.type);
      w.put(b.row_size);
      for (uint32_t i = 0; i < D; ++i) w.put(b.data + size_t(i % m) * b.row_size, b.row_size);
    }
    for (const auto& b : s.v) {
      w.put(b.type);
      if (!s.v_trans) {
        w.put(b.row_size);
        for (uint32_t i = 0; i < D; ++i) w.put(b.data + size_t(i % m) * b.row_size, b.row_size);
      } else {
        w.put(uint32_t(b.row_size));
        w.put(b.n_embd);
        for (uint32_t j = 0; j < b.n_embd; ++j)
          for (uint32_t i = 0; i < D; ++i) w.put(b.data + (size_t(j) * m + i % m) * b.row_size, b.row_size);
      }
    }
  }
  return w.buf;
}

std::vector<uint8_t> get_state(llama_context* ctx) {
  const size_t n = llama_state_seq_get_size(ctx, 0);
  if (n == 0) die("llama_state_seq_get_size returned 0");
  std::vector<uint8_t> buf(n);
  const size_t got = llama_state_seq_get_data(ctx, buf.data(), buf.size(), 0);
  if (got != n) die("llama_state_seq_get_data wrote " + std::to_string(got) + " of " + std::to_string(n) + " bytes");
  return buf;
}

void set_state(llama_context* ctx, const std::vector<uint8_t>& buf) {
  const size_t got = llama_state_seq_set_data(ctx, buf.data(), buf.size(), 0);
  if (got != buf.size())
    die("llama_state_seq_set_data read " + std::to_string(got) + " of " + std::to_string(buf.size()) + " bytes");
}

// Decodes tokens[i] at positions p0 + i in batches of n_batch; logits of the last token only.
void decode_range(llama_context* ctx, const std::vector<llama_token>& tokens, int p0, int n_batch) {
  llama_batch b = llama_batch_init(n_batch, 0, 1);
  for (size_t s = 0; s < tokens.size(); s += n_batch) {
    const int k = static_cast<int>(std::min<size_t>(n_batch, tokens.size() - s));
    for (int i = 0; i < k; ++i) {
      b.token[i] = tokens[s + i];
      b.pos[i] = p0 + static_cast<int>(s) + i;
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = 0;
      b.logits[i] = (s + i + 1 == tokens.size());
    }
    b.n_tokens = k;
    if (llama_decode(ctx, b) != 0) die("llama_decode failed at position " + std::to_string(p0 + s));
  }
  llama_batch_free(b);
}

// Logits of the last decoded token: all finite?
bool logits_finite(llama_context* ctx, int n_vocab) {
  const float* l = llama_get_logits_ith(ctx, -1);
  if (!l) return false;
  for (int i = 0; i < n_vocab; ++i)
    if (!std::isfinite(l[i])) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, json_path, fill = "synthetic", ctk = "f16", ctv = "f16";
  int threads = 2, depth = -1, n_gen = 32, reps = 3, prefill = 256, warmup = -1;
  uint32_t seed = 1234;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + k);
      return argv[++i];
    };
    if (k == "-m") model_path = val();
    else if (k == "-t") threads = std::stoi(val());
    else if (k == "--depth") depth = std::stoi(val());
    else if (k == "-n") n_gen = std::stoi(val());
    else if (k == "--ctk" || k == "-ctk") ctk = val();
    else if (k == "--ctv" || k == "-ctv") ctv = val();
    else if (k == "--reps") reps = std::stoi(val());
    else if (k == "--prefill") prefill = std::stoi(val());
    else if (k == "--fill") fill = val();
    else if (k == "--warmup") warmup = std::stoi(val());
    else if (k == "--seed") seed = static_cast<uint32_t>(std::stoul(val()));
    else if (k == "--json") json_path = val();
    else if (k == "-v") g_verbose = true;
    else die("unknown argument " + k +
             "\nusage: depth_bench -m MODEL [-t THREADS] --depth D [-n N] [--ctk TYPE] [--ctv TYPE] [--reps R] "
             "[--prefill m] [--fill synthetic|real] [--warmup W] [--seed S] [--json FILE] [-v]");
  }
  if (model_path.empty()) die("-m MODEL is required");
  if (depth < 1) die("--depth D (>= 1) is required");
  if (fill != "synthetic" && fill != "real") die("--fill is synthetic or real");
  if (n_gen < 1 || reps < 1 || threads < 1 || prefill < 1) die("-n, --reps, -t and --prefill must be >= 1");
  if (fill == "synthetic" && prefill > depth) prefill = depth;
  const ggml_type type_k = parse_type(ctk), type_v = parse_type(ctv);
  if (warmup < 0) warmup = n_gen;

  llama_log_set(log_cb, nullptr);
  llama_backend_init();
  const std::string load_before = load_average();

  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) die("cannot load " + model_path);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);

  const int n_batch = 512;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(depth + std::max(n_gen, warmup) + 256);
  cp.n_batch = cp.n_ubatch = n_batch;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.type_k = type_k;
  cp.type_v = type_v;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
  cp.no_perf = false;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create the context (KV type not supported with flash attention on this backend?)");
  llama_memory_t mem = llama_get_memory(ctx);

  std::mt19937 rng(seed);
  // Ordinary token ids: avoid the lowest ids (often control tokens) and the top of the vocabulary.
  std::uniform_int_distribution<int> tok(100, std::max(101, std::min(n_vocab, 150000) - 1));
  auto tokens = [&](int n) {
    std::vector<llama_token> t(n);
    for (auto& x : t) x = tok(rng);
    return t;
  };

  // Fill the cache to D positions.
  double t_fill = now_s();
  size_t state_bytes = 0;
  bool roundtrip_identical = false, reread_identical = false;
  double m_logit_maxdiff = -1;
  if (fill == "real") {
    decode_range(ctx, tokens(depth), 0, n_batch);
  } else {
    const std::vector<llama_token> pre = tokens(prefill);
    decode_range(ctx, pre, 0, n_batch);
    const std::vector<uint8_t> st = get_state(ctx);
    const SeqState s = parse_state(st, llama_model_n_layer(model));
    if (s.cell_count != static_cast<uint32_t>(prefill)) die("the state holds " + std::to_string(s.cell_count) + " cells, not " + std::to_string(prefill));
    for (uint32_t i = 0; i < s.cell_count; ++i)
      if (s.pos[i] != static_cast<int32_t>(i)) die("the prefilled cells are not at positions 0..m-1 in order");
    if (s.v_trans) std::fprintf(stderr, "depth_bench: note: V is transposed in this cache\n");

    // Self-check of the builder: D = m rebuilds the state byte for byte; loading it, the next token's
    // logits equal those after the real prefill.
    const llama_token probe = tok(rng);
    decode_range(ctx, {probe}, prefill, n_batch);
    const float* l0p = llama_get_logits_ith(ctx, -1);
    const std::vector<float> l0(l0p, l0p + n_vocab);
    const std::vector<uint8_t> same = expand_state(s, s.cell_count);
    roundtrip_identical = same == st;
    if (!roundtrip_identical) die("the builder does not reproduce the state at D = m");
    set_state(ctx, same);
    if (llama_memory_seq_pos_max(mem, 0) != prefill - 1) die("reloading the m-cell state: wrong pos_max");
    decode_range(ctx, {probe}, prefill, n_batch);
    const float* l1 = llama_get_logits_ith(ctx, -1);
    m_logit_maxdiff = 0;
    for (int i = 0; i < n_vocab; ++i) m_logit_maxdiff = std::max(m_logit_maxdiff, double(std::fabs(l1[i] - l0[i])));

    // The synthetic fill.
    const std::vector<uint8_t> big = expand_state(s, static_cast<uint32_t>(depth));
    state_bytes = big.size();
    set_state(ctx, big);
    const std::vector<uint8_t> back = get_state(ctx);
    reread_identical = back == big;
    if (!reread_identical) die("the state read back after loading differs from the one loaded");
  }
  t_fill = now_s() - t_fill;
  const llama_pos pmax = llama_memory_seq_pos_max(mem, 0);
  if (pmax != depth - 1) die("after the fill pos_max = " + std::to_string(pmax) + ", expected " + std::to_string(depth - 1));

  // Warm-up (W untimed steps at positions D.., default N: the model's pages and the KV cache are touched
  // once), then R repeats of N decode steps at positions D .. D+N-1, the cache cut back to D before each.
  const std::vector<llama_token> gen = tokens(n_gen);
  {
    const std::vector<llama_token> w = tokens(std::max(1, warmup));
    for (size_t i = 0; i < w.size(); ++i) decode_range(ctx, {w[i]}, depth + static_cast<int>(i), n_batch);
  }
  bool finite = logits_finite(ctx, n_vocab);
  std::vector<double> tps, others;  // per repeat: tok/s, CPUs other processes kept busy meanwhile
  llama_batch one = llama_batch_init(1, 0, 1);  // the timed steps allocate nothing
  for (int r = 0; r < reps; ++r) {
    if (!llama_memory_seq_rm(mem, 0, depth, -1)) die("llama_memory_seq_rm failed");
    if (llama_memory_seq_pos_max(mem, 0) != depth - 1) die("restoring depth D between repeats failed");
    const double t0 = now_s(), b0 = machine_busy_s(), c0 = own_cpu_s();
    for (int i = 0; i < n_gen; ++i) {
      one.token[0] = gen[i];
      one.pos[0] = depth + i;
      one.n_seq_id[0] = 1;
      one.seq_id[0][0] = 0;
      one.logits[0] = 1;
      one.n_tokens = 1;
      if (llama_decode(ctx, one) != 0) die("llama_decode failed at position " + std::to_string(depth + i));
      llama_synchronize(ctx);
    }
    const double dt = now_s() - t0;
    tps.push_back(n_gen / dt);
    others.push_back(std::max(0.0, (machine_busy_s() - b0) - (own_cpu_s() - c0)) / dt);
    finite = finite && logits_finite(ctx, n_vocab);
  }
  llama_batch_free(one);
  if (!finite) die("non-finite logits after the fill");
  const double med = median(tps);
  const std::string load_after = load_average();

  const size_t kv_bytes = llama_state_seq_get_size(ctx, 0);
  std::printf("model %s, %d threads, KV %s/%s, flash attention on, depth %d (%s fill%s), decode %d x %d reps\n",
              model_path.c_str(), threads, ggml_type_name(type_k), ggml_type_name(type_v), depth, fill.c_str(),
              fill == "synthetic" ? (", from " + std::to_string(prefill) + " real positions").c_str() : "", n_gen, reps);
  std::printf("fill %.2f s, KV state %.1f MiB at depth %d; load average %s -> %s\n", t_fill,
              kv_bytes / 1048576.0, depth + n_gen, load_before.c_str(), load_after.c_str());
  if (fill == "synthetic")
    std::printf("checks: builder at D=m byte-identical %s, reloaded m-cell logits max |diff| %.3g, D-cell state read "
                "back identical %s, pos_max %d, logits finite %s\n",
                roundtrip_identical ? "yes" : "no", m_logit_maxdiff, reread_identical ? "yes" : "no", pmax,
                finite ? "yes" : "no");
  std::printf("decode tok/s per repeat:");
  for (double v : tps) std::printf(" %.3f", v);
  std::printf("\nother processes' CPUs busy per repeat:");
  for (double v : others) std::printf(" %.2f", v);
  std::printf("\ndecode tok/s (median): %.3f   best: %.3f\n", med, *std::max_element(tps.begin(), tps.end()));

  char js[2048];
  std::string per;
  std::string oth;
  for (size_t i = 0; i < tps.size(); ++i) per += (i ? "," : "") + std::to_string(tps[i]);
  for (size_t i = 0; i < others.size(); ++i) oth += (i ? "," : "") + std::to_string(others[i]);
  std::snprintf(js, sizeof js,
                "{\"engine\":\"llama.cpp\",\"model\":\"%s\",\"threads\":%d,\"ctk\":\"%s\",\"ctv\":\"%s\",\"depth\":%d,"
                "\"fill\":\"%s\",\"prefill\":%d,\"n\":%d,\"reps\":%d,\"warmup\":%d,\"decode_tok_s\":%.4f,\"decode_tok_s_reps\":[%s],\"others_cpus_reps\":[%s],"
                "\"fill_s\":%.3f,\"state_bytes\":%zu,\"logits_finite\":%s,\"load_before\":\"%s\",\"load_after\":\"%s\"}",
                model_path.c_str(), threads, ggml_type_name(type_k), ggml_type_name(type_v), depth, fill.c_str(),
                fill == "synthetic" ? prefill : depth, n_gen, reps, warmup, med, per.c_str(), oth.c_str(), t_fill, state_bytes,
                finite ? "true" : "false", load_before.c_str(), load_after.c_str());
  std::printf("json: %s\n", js);
  if (!json_path.empty()) std::ofstream(json_path) << js << "\n";

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
