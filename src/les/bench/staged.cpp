#include "les/bench/staged.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "les/bench/child.h"
#include "les/sched/io_probe.h"
#include "les/bench/run_row.h"
#include "les/bench/stats.h"
#include "les/gguf/gguf.h"
#include "les/model/model.h"
#include "les/pack/pack.h"
#include "les/sched/budget.h"
#include "les/sched/streaming_experts.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"
#include "les/util/hash.h"
#include "les/util/clock.h"
#include "les/util/meminfo.h"

namespace les::bench {

namespace {

constexpr int kDiskProbeQueueDepth = 8;

double mib(double b) { return b / 1048576.0; }

void require_file(const std::string& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(strfmt("%s '%s': %s", what, path.c_str(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(strfmt("%s '%s' is not a regular file", what, path.c_str()));
}

// A temporary directory for packed files, removed with everything in it when the bench ends
// (also on errors).
class TempDir {
 public:
  explicit TempDir(std::string parent) : parent_(std::move(parent)) {}
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() {
    if (path_.empty()) {
      std::string tmpl = (parent_.empty() ? std::string(".") : parent_) + "/les-bench-XXXXXX";
      std::vector<char> buf(tmpl.begin(), tmpl.end());
      buf.push_back('\0');
      if (!::mkdtemp(buf.data())) {
        throw Error(strfmt("cannot create a temporary directory in '%s': %s (choose one with --work-dir)",
                           parent_.empty() ? "." : parent_.c_str(), std::strerror(errno)));
      }
      path_ = buf.data();
    }
    return path_;
  }

 private:
  std::string parent_, path_;
};

// While the bench runs, SIGINT and SIGTERM only set a flag: the measuring process dies of the
// signal (child.cpp restores the default), the parent sees that and throws, and the temporary
// files go with the stack. The previous handlers come back when the bench ends.
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int) { g_interrupted = 1; }

class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = 0;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~InterruptGuard() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  static void check() {
    if (g_interrupted) throw Error("interrupted (temporary files removed)");
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// What a measuring process learns about one file before the runs.
struct FileProbe {
  int32_t n_layer = 0, n_expert = 0, n_embd = 0, n_vocab = 0;
  uint64_t expert_bytes_total = 0, file_bytes = 0;
  uint8_t packed = 0;
  storage::DiskRates disk;        // direct I/O expert reads: the device probe's at the rows' depth
  storage::DiskRates naive_disk;  // the same through the naive buffered loader (original's probe)
  uint64_t read_chunk = 0;   // read shaping for lookahead rows on this file (0: whole reads)
  double whole_mbs = 0, chunk_mbs = 0;  // the probe's merits of whole reads and of that chunk
  uint64_t mem = 0;          // the budget (original's probe)
  double cache_share = 0;    // the baseline's cache / expert bytes (original's probe)
};
static_assert(std::is_trivially_copyable_v<FileProbe>);

std::vector<int32_t> make_prompt(const BenchOptions& o, const Tokenizer& tok, int n_vocab) {
  std::vector<int32_t> p;
  if (!o.prompt_text.empty()) {
    p = tok.encode(o.prompt_text, false, false);
    if (p.empty()) throw Error("the -p prompt gives no tokens");
  } else if (!o.prompt_file.empty()) {
    std::ifstream f(o.prompt_file, std::ios::binary);
    if (!f) throw Error(strfmt("cannot read prompt file '%s'", o.prompt_file.c_str()));
    std::string text(64 * static_cast<size_t>(o.prompt_tokens) + 1024, '\0');
    f.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(f.gcount()));
    p = tok.encode(text, false, false);
    if (p.empty()) throw Error(strfmt("prompt file '%s' gives no tokens", o.prompt_file.c_str()));
  } else {
    // Fixed pseudo-random ids below the last 1% of the vocabulary (where control tokens sit).
    uint64_t x = 12345;
    const uint64_t range = static_cast<uint64_t>(std::max(1, n_vocab - n_vocab / 100));
    for (int i = 0; i < o.prompt_tokens; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      p.push_back(static_cast<int32_t>(x % range));
    }
  }
  if (static_cast<int>(p.size()) > o.prompt_tokens) p.resize(static_cast<size_t>(o.prompt_tokens));
  return p;
}

int ctx_for(const BenchOptions& o, size_t n_prompt) {
  RunInputs in;
  in.prompt.resize(n_prompt);
  in.n_gen = o.n_gen;
  return in.n_ctx();
}

// Probes a file in a child (loads its dense part, measures the disk); the original's probe also
// makes the prompt and settles the budget.
FileProbe probe_file(const std::string& path, const BenchOptions& o, bool original, std::vector<int32_t>* prompt) {
  const ChildOutcome out = run_in_child([&]() {
    auto model = Model::load(path, LoadOptions{.map_experts = false});
    const ModelConfig& c = model->config();
    FileProbe p;
    p.n_layer = c.n_layer;
    p.n_expert = c.n_expert;
    p.n_embd = c.n_embd;
    p.n_vocab = c.n_vocab;
    for (int l = 0; l < c.n_layer; ++l) p.expert_bytes_total += model->expert_size(l) * static_cast<uint64_t>(c.n_expert);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) p.file_bytes = static_cast<uint64_t>(st.st_size);
    p.packed = model->packed() != nullptr;
    if (p.expert_bytes_total == 0) throw Error(strfmt("'%s' has no routed experts to stream", path.c_str()));
    std::vector<int32_t> toks;
    if (original) {
      Tokenizer tok(vocab_from_gguf(model->gguf()));
      toks = make_prompt(o, tok, c.n_vocab);
      const int n_ctx = ctx_for(o, toks.size());
      const std::vector<uint64_t> slots = StreamingExperts::layer_slot_bytes_for(*model, storage::IoMode::naive);
      const uint64_t slot = *std::max_element(slots.begin(), slots.end());
      p.mem = o.mem;
      if (p.mem == 0) {
        // The budget whose baseline cache holds cache_share of the experts: the fixed part
        // (dense, KV, work, overhead) plus that share (to a whole slot).
        const BudgetPlan big = plan_budget(*model, uint64_t(1) << 50, n_ctx, 256, slots, 0, o.type_k, o.type_v);
        const uint64_t fixed = big.fixed();
        p.mem = fixed + static_cast<uint64_t>(o.cache_share * static_cast<double>(p.expert_bytes_total)) + slot / 2;
      }
      const BudgetPlan bp = plan_budget(*model, p.mem, n_ctx, 256, slots, 0, o.type_k, o.type_v);  // throws: budget too small
      p.cache_share = static_cast<double>(bp.cache) / static_cast<double>(p.expert_bytes_total);
    }
    IoProbeOptions po;
    po.quick = o.quick_probe;
    po.refresh = o.probe_refresh;
    po.progress = o.progress;
    const storage::DeviceProbe dp = probe_model_io(*model, po).probe;
    p.disk = dp.rates(kDiskProbeQueueDepth);
    if (original) {
      // The original file's streamed rows read through the naive buffered loader (pread into the
      // page cache, a copy, the pages dropped): their ceiling is what that path gets from the disk.
      IoProbeOptions pn = po;
      pn.io_mode = storage::IoMode::naive;
      pn.register_buffers = false;
      p.naive_disk = probe_model_io(*model, pn).probe.rates(kDiskProbeQueueDepth);
    }
    // Read shaping as --read-chunk auto would choose it for the direct-I/O lookahead rows.
    StreamingOptions shaped;
    shaped.queue_depth = kDiskProbeQueueDepth;
    const storage::ChunkChoice cc = storage::choose_read_chunk(dp, experts_in_flight(shaped, *model), kDiskProbeQueueDepth);
    p.read_chunk = cc.chunk;
    p.whole_mbs = cc.whole_mbs;
    p.chunk_mbs = cc.chosen_mbs;
    std::string s(sizeof p + toks.size() * sizeof(int32_t), '\0');
    std::memcpy(s.data(), &p, sizeof p);
    if (!toks.empty()) std::memcpy(s.data() + sizeof p, toks.data(), toks.size() * sizeof(int32_t));
    return s;
  });
  InterruptGuard::check();
  if (!out.ok) throw Error(out.error);
  if (out.payload.size() < sizeof(FileProbe)) throw Error("the probe process returned no result");
  FileProbe p;
  std::memcpy(&p, out.payload.data(), sizeof p);
  if (prompt) {
    prompt->resize((out.payload.size() - sizeof p) / sizeof(int32_t));
    if (!prompt->empty()) std::memcpy(prompt->data(), out.payload.data() + sizeof p, prompt->size() * sizeof(int32_t));
  }
  return p;
}

std::string shaping_note(const char* which, const FileProbe& p) {
  return strfmt("Read shaping of the %s file's rows (--read-chunk auto, from the device probe): %s (whole reads %.0f MB/s%s).",
                which, storage::read_shaping_name(p.read_chunk).c_str(), p.whole_mbs,
                p.read_chunk ? strfmt(", chunked %.0f MB/s", p.chunk_mbs).c_str() : "");
}

void same_shape(const FileProbe& a, const FileProbe& b, const std::string& what, const std::string& path,
                const std::string& model) {
  if (a.n_layer != b.n_layer || a.n_expert != b.n_expert || a.n_embd != b.n_embd || a.n_vocab != b.n_vocab) {
    throw Error(strfmt("%s '%s' is not the same model shape as '%s' (%d layers, %d experts, n_embd %d, vocab %d vs "
                       "%d, %d, %d, %d)",
                       what.c_str(), path.c_str(), model.c_str(), b.n_layer, b.n_expert, b.n_embd, b.n_vocab, a.n_layer,
                       a.n_expert, a.n_embd, a.n_vocab));
  }
}

void pack_in_child(const std::string& in, const std::string& out_path) {
  const ChildOutcome out = run_in_child([&]() {
    pack::pack_model(in, out_path);
    return std::string();
  });
  InterruptGuard::check();
  if (!out.ok) throw Error(strfmt("packing '%s': %s", in.c_str(), out.error.c_str()));
}

// One process to start per repeat: a row, or the routing oracle beside a lookahead row.
struct Slot {
  size_t row = 0;       // index into the report's rows
  bool oracle = false;
  bool reference = false;  // the mixed file resident: the compute term of its rows' ceilings, not a row
  bool dropped = false;    // the +speculation row could not run (its warm-up failed): skipped, with the reason
  int group = 0;        // hash group
  RowPlan plan;
  std::string label;
  std::vector<RunMeasure> runs;  // counted repeats
  std::vector<double> rss;       // counted repeats, bytes
  std::vector<int32_t> last_tokens;
};

std::string short_hash(uint64_t h) { return hex64(h); }

}  // namespace

BenchReport run_staged_bench(const BenchOptions& o) {
  const double t_begin = now_s();
  // --- input checks (cheap, before any work) ---
  if (o.model.empty()) throw Error("give the model with -m FILE");
  require_file(o.model, "model");
  if (!o.packed.empty()) require_file(o.packed, "--packed file");
  if (!o.mixed.empty()) require_file(o.mixed, "--mixed file");
  if (!o.draft.empty()) require_file(o.draft, "--draft file");
  if (!o.prompt_file.empty()) require_file(o.prompt_file, "prompt file");
  if (o.mem == 0 && !(o.cache_share > 0 && o.cache_share <= 1)) throw Error("give the memory budget with --mem SIZE");
  if (o.reps < 1 || o.reps > 100) throw Error("--reps must be in [1, 100]");
  if (o.n_gen < 2 || o.n_gen > 100000) throw Error("-n must be in [2, 100000] (decode speed needs two tokens)");
  if (o.prompt_tokens < 1 || o.prompt_tokens > 100000) throw Error("--prompt-tokens must be in [1, 100000]");
  if (o.threads < 1 || o.threads > 256) throw Error("-t must be in [1, 256]");
  if (o.spec_oracle > 1) throw Error("--spec-oracle: the acceptance must be in [0, 1]");
  if (o.rows.empty()) throw Error("no rows to run");
  auto want = [&](RowKind k) { return std::find(o.rows.begin(), o.rows.end(), k) != o.rows.end(); };

  BenchReport rep;
  rep.model = o.model;
  rep.threads = o.threads;
  rep.n_gen = o.n_gen;
  rep.reps = o.reps;
  TempDir tmp(o.work_dir);
  const InterruptGuard interrupts;
  auto say = [&](const std::string& s) {
    if (!o.progress) return;
    std::fprintf(stderr, o.tty ? "\r\033[K%s" : "%s\n", s.c_str());
  };

  // --- the files ---
  say("les bench: probing " + o.model);
  std::vector<int32_t> prompt;
  const FileProbe orig = probe_file(o.model, o, true, &prompt);
  rep.mem = orig.mem;
  rep.cache_share = orig.cache_share;
  rep.n_prompt = static_cast<int>(prompt.size());
  rep.disk_original = orig.disk;
  rep.disk_original_naive = orig.naive_disk;

  const bool mixed_runs = want(RowKind::mixed) && !o.mixed.empty();
  const bool spec_on_mixed = mixed_runs;
  const bool spec_runs = want(RowKind::spec) && (o.spec_oracle >= 0 || !o.draft.empty());
  const bool need_packed = want(RowKind::loadopt) || (spec_runs && !spec_on_mixed);

  uint64_t chunk_packed = 0, chunk_mixed = 0;  // read shaping of the direct-I/O rows, per file
  std::string packed_path = o.packed;
  if (need_packed) {
    if (packed_path.empty()) {
      packed_path = tmp.path() + "/packed.gguf";
      say("les bench: packing " + o.model + " (les pack) into " + tmp.path());
      pack_in_child(o.model, packed_path);
      rep.notes.push_back(strfmt("+load optimization reads a packed copy of the model that les bench made with les pack "
                                 "in a temporary directory (%s, deleted afterwards); give --packed FILE to use your own.",
                                 tmp.path().c_str()));
    }
    const FileProbe pk = probe_file(packed_path, o, false, nullptr);
    same_shape(orig, pk, "--packed file", packed_path, o.model);
    if (!pk.packed) throw Error(strfmt("--packed file '%s' is not packed (make one with: les pack %s OUT)",
                                       packed_path.c_str(), o.model.c_str()));
    rep.disk_packed = pk.disk;
    chunk_packed = pk.read_chunk;
    rep.notes.push_back(shaping_note("packed", pk));
  }
  std::string mixed_path = o.mixed;
  if (mixed_runs) {
    FileProbe mx = probe_file(mixed_path, o, false, nullptr);
    same_shape(orig, mx, "--mixed file", mixed_path, o.model);
    if (!mx.packed) {
      mixed_path = tmp.path() + "/mixed-packed.gguf";
      say("les bench: packing " + o.mixed + " (les pack) into " + tmp.path());
      pack_in_child(o.mixed, mixed_path);
      mx = probe_file(mixed_path, o, false, nullptr);
      rep.notes.push_back(strfmt("+mixed precision reads a packed copy of %s made by les bench (deleted afterwards).",
                                 o.mixed.c_str()));
    }
    rep.disk_mixed = mx.disk;
    chunk_mixed = mx.read_chunk;
    rep.notes.push_back(shaping_note("mixed", mx));
  }

  std::string drafter_kind;
  if (spec_runs) {
    if (o.spec_oracle >= 0) {
      drafter_kind = "oracle";
    } else {
      const gguf::File g = gguf::read_file(o.draft);
      drafter_kind = g.get_string("general.architecture") == "dflash" ? "dspark" : "draft";
    }
  }

  // --- the rows and their processes ---
  for (RowKind k : o.rows) {
    RowResult r;
    r.kind = k;
    rep.rows.push_back(r);
  }
  std::vector<Slot> slots;
  auto add_slot = [&](size_t row, const RowPlan& plan, bool oracle, int group) {
    Slot s;
    s.row = row;
    s.plan = plan;
    s.oracle = oracle;
    s.group = group;
    s.label = std::string(row_label(plan.kind)) + (oracle ? " (routing oracle)" : "");
    if (oracle) {
      s.plan.oracle = true;
      s.plan.oracle_depth = o.oracle_depth;
    }
    slots.push_back(std::move(s));
  };
  for (size_t i = 0; i < rep.rows.size(); ++i) {
    RowResult& r = rep.rows[i];
    RowPlan p;
    p.kind = r.kind;
    p.mem = rep.mem;
    switch (r.kind) {
      case RowKind::resident: {
        const uint64_t avail = memory_available_to_process();
        if (orig.file_bytes <= rep.mem) {
          r.note = "fits the budget";
        } else if (orig.file_bytes * 2 <= avail) {
          r.note = strfmt("reference: the %.0f MiB file is over the budget; run as the compute reference",
                          mib(static_cast<double>(orig.file_bytes)));
        } else {
          r.note = strfmt("skipped: the %.0f MiB file is over the budget and over half the available memory",
                          mib(static_cast<double>(orig.file_bytes)));
          continue;
        }
        p.file = o.model;
        p.resident = true;
        // Read into huge pages where it fits with its margin (as les run does by default).
        p.resident_memory = choose_resident_memory(orig.file_bytes);
        r.how = p.resident_memory == ResidentMemory::read ? "read into memory (huge pages)" : "mapped, in page cache";
        break;
      }
      case RowKind::baseline:
        p.file = o.model;
        p.io = storage::IoMode::naive;
        p.schedule = Schedule::ondemand;
        r.how = "original GGUF, naive buffered loader, on-demand";
        break;
      case RowKind::lookahead:
        p.file = o.model;
        p.io = storage::IoMode::naive;
        p.schedule = Schedule::lookahead;
        r.how = "original GGUF, naive buffered loader, lookahead";
        break;
      case RowKind::loadopt:
        p.file = packed_path;
        p.io = storage::IoMode::uring;
        p.schedule = Schedule::lookahead;
        p.read_chunk = chunk_packed;
        r.how = "packed, direct I/O (io_uring), lookahead, " + storage::read_shaping_name(chunk_packed);
        break;
      case RowKind::mixed:
        if (!mixed_runs) {
          r.note = "skipped: no --mixed file (make one with les quantize IN OUT --target-size SIZE --calib TEXT)";
          continue;
        }
        p.file = mixed_path;
        p.io = storage::IoMode::uring;
        p.schedule = Schedule::lookahead;
        p.read_chunk = chunk_mixed;
        r.how = "mixed precision, packed, direct I/O, lookahead, " + storage::read_shaping_name(chunk_mixed);
        r.hash_group = 1;
        break;
      case RowKind::spec:
        if (!spec_runs) {
          r.note = "skipped: no --draft file or --spec-oracle acceptance";
          continue;
        }
        p.file = spec_on_mixed ? mixed_path : packed_path;
        p.io = storage::IoMode::uring;
        p.read_chunk = spec_on_mixed ? chunk_mixed : chunk_packed;
        p.schedule = Schedule::lookahead;
        p.drafter = drafter_kind;
        p.drafter_path = o.draft;
        p.acceptance = o.spec_oracle;
        r.hash_group = spec_on_mixed ? 1 : 0;
        r.how = std::string(spec_on_mixed ? "on +mixed precision" : "on +load optimization") + ", " +
                (drafter_kind == "oracle" ? strfmt("the oracle draft at acceptance %.2f", o.spec_oracle)
                 : drafter_kind == "dspark" ? "the DSpark drafter " + o.draft
                                            : "the dense draft model " + o.draft) +
                ", load-aware draft depth (at most 6)";
        break;
    }
    r.file = p.file;
    r.ran = true;
    add_slot(i, p, false, r.hash_group);
    if (o.oracles && p.schedule == Schedule::lookahead && !p.resident && p.drafter.empty()) {
      add_slot(i, p, true, r.hash_group);
    }
  }
  // The mixed file's compute reference, where the original's resident row runs.
  bool have_resident = false;
  for (const Slot& s : slots) have_resident = have_resident || s.plan.resident;
  if (mixed_runs && have_resident) {
    for (size_t i = 0; i < rep.rows.size(); ++i) {
      if (rep.rows[i].kind != RowKind::mixed) continue;
      RowPlan p;
      p.kind = RowKind::mixed;
      p.file = o.mixed;
      p.resident = true;
      p.resident_memory = choose_resident_memory(std::filesystem::file_size(o.mixed));
      add_slot(i, p, false, 1);
      slots.back().reference = true;
      slots.back().label = "+mixed precision (resident, compute reference)";
    }
  }
  if (drafter_kind == "oracle") {
    bool have_source = false;
    for (const Slot& s : slots) have_source = have_source || (s.group == (spec_on_mixed ? 1 : 0) && s.plan.drafter.empty());
    if (!have_source) throw Error("--spec-oracle needs a row with the same weights before spec in --rows (e.g. baseline)");
  }

  // --- the runs: a warm-up repeat, then the counted ones, rows interleaved ---
  // The warm-up and odd-numbered repeats run the slots in order, even-numbered ones in reverse: on
  // a VM a run reads faster right after another run over the same file (the host caches), so a
  // fixed order would favour whichever row comes second on a file. What the warm-up records (the
  // greedy tokens for the oracle drafter, each group's routing for the routing oracle) serves every
  // repeat: outputs and routing are identical across schedules.
  uint64_t group_hash[2] = {0, 0};
  std::string group_first[2];
  std::vector<int32_t> recording[2];
  std::vector<int32_t> routing[2];
  for (int r = -1; r < o.reps; ++r) {
    const std::string rep_name = r < 0 ? std::string("warm-up") : strfmt("repeat %d/%d", r + 1, o.reps);
    std::vector<Slot*> order;
    for (Slot& s : slots) order.push_back(&s);
    if (r % 2 == 1) std::reverse(order.begin(), order.end());
    for (Slot* sp : order) {
      Slot& s = *sp;
      if (s.dropped) continue;
      RunInputs in;
      in.prompt = prompt;
      in.n_gen = o.n_gen;
      in.threads = o.threads;
      in.type_k = o.type_k;
      in.type_v = o.type_v;
      if (s.plan.drafter == "oracle") in.recording = recording[s.group];
      if (s.oracle) in.routing = routing[s.group];
      const bool record_routing = r < 0 && !s.oracle && !s.plan.resident && s.plan.drafter.empty() &&
                                  routing[s.group].empty();
      const std::string prefix = strfmt("les bench: %s, %s", rep_name.c_str(), s.label.c_str());
      if (o.progress && o.tty) {
        in.progress_prefix = prefix;
        say(prefix);
      }
      const ChildOutcome out = run_in_child([&]() {
        std::vector<int32_t> toks, route;
        const RunMeasure m = run_row_once(s.plan, in, &toks, record_routing ? &route : nullptr);
        return encode_run(m, toks, route);
      });
      InterruptGuard::check();
      if (!out.ok && r < 0 && !s.plan.drafter.empty()) {
        // The drafter is an addition on top of the other rows: when it cannot run (e.g. its
        // weights do not fit the budget) the row is skipped with the reason, the rest still runs.
        s.dropped = true;
        rep.rows[s.row].ran = false;
        rep.rows[s.row].note = "skipped: " + out.error;
        say(strfmt("%s: skipped: %s", prefix.c_str(), out.error.c_str()));
        if (o.progress && o.tty) std::fputc('\n', stderr);
        continue;
      }
      if (!out.ok) {
        if (o.progress && o.tty) std::fputc('\n', stderr);
        throw Error(strfmt("%s (%s): %s", s.label.c_str(), rep_name.c_str(), out.error.c_str()));
      }
      RunMeasure m;
      std::vector<int32_t> toks, route;
      decode_run(out.payload, &m, &toks, &route);
      if (record_routing && !route.empty()) routing[s.group] = std::move(route);
      if (!o.tty) say(strfmt("%s: decode %.2f tok/s, prefill %.1f tok/s (%.1f s)", prefix.c_str(), m.decode_tps,
                             m.prefill_tps, out.wall_s));
      // Equal outputs where they must be.
      const int g = s.group;
      if (group_first[g].empty()) {
        group_hash[g] = m.logits_hash;
        group_first[g] = s.label;
      } else if (m.logits_hash != group_hash[g] && rep.hashes_ok) {
        rep.hashes_ok = false;
        rep.hash_problem = strfmt("%s (%s) ended with logits hash %s, %s with %s: their outputs must be identical",
                                  s.label.c_str(), rep_name.c_str(), short_hash(m.logits_hash).c_str(),
                                  group_first[g].c_str(), short_hash(group_hash[g]).c_str());
      }
      if (s.plan.drafter.empty() && recording[g].empty()) {
        recording[g] = prompt;
        recording[g].insert(recording[g].end(), toks.begin(), toks.end());
      }
      if (r >= 0) {
        s.runs.push_back(m);
        s.rss.push_back(static_cast<double>(out.peak_rss));
      }
    }
  }
  if (o.progress && o.tty) std::fprintf(stderr, "\r\033[K");

  // --- medians and the columns derived from them ---
  auto col = [](const Slot& s, auto f) {
    std::vector<double> v;
    for (const RunMeasure& m : s.runs) v.push_back(f(m));
    return median(v);
  };
  auto per_token = [](const RunMeasure& m, double x) {
    return m.decode_tokens() > 0 ? x / m.decode_tokens() : kNaN;
  };
  // The ceiling's compute term per hash group (the original weights, the mixed file's): a resident
  // run's time per token, else the streamed runs' time not spent waiting for reads (the smallest).
  double compute_s[2] = {kNaN, kNaN};
  for (const Slot& s : slots) {
    if (s.plan.resident) compute_s[s.group] = col(s, [&](const RunMeasure& m) { return per_token(m, m.gen_s); });
  }
  rep.compute_source = "the resident row's decode time per token";
  if (std::isnan(compute_s[0])) {
    for (const Slot& s : slots) {
      if (s.group != 0 || !s.plan.drafter.empty() || s.oracle) continue;
      const double c = col(s, [&](const RunMeasure& m) { return per_token(m, m.gen_s - m.stall_s); });
      if (std::isnan(compute_s[0]) || c < compute_s[0]) compute_s[0] = c;
    }
    rep.compute_source = "the streamed rows' decode time not spent waiting for reads, per token (no resident row)";
  }
  if (std::isnan(compute_s[1])) {
    for (const Slot& s : slots) {
      if (s.group != 1 || !s.plan.drafter.empty() || s.oracle) continue;
      const double c = col(s, [&](const RunMeasure& m) { return per_token(m, m.gen_s - m.stall_s); });
      if (std::isnan(compute_s[1]) || c < compute_s[1]) compute_s[1] = c;
    }
  }
  rep.compute_ms_per_token_mixed = 1e3 * compute_s[1];
  rep.compute_ms_per_token = 1e3 * compute_s[0];

  for (const Slot& s : slots) {
    if (s.reference || s.dropped) continue;
    RowResult& r = rep.rows[s.row];
    if (s.oracle) {
      r.oracle_tps = col(s, [](const RunMeasure& m) { return m.decode_tps; });
      continue;
    }
    for (const RunMeasure& m : s.runs) r.decode_per_rep.push_back(m.decode_tps);
    r.decode_tps = col(s, [](const RunMeasure& m) { return m.decode_tps; });
    r.prefill_tps = col(s, [](const RunMeasure& m) { return m.prefill_tps; });
    r.load_s = col(s, [](const RunMeasure& m) { return m.load_s; });
    r.ttft_s = col(s, [](const RunMeasure& m) { return m.ttft_s; });
    r.peak_rss_mib = mib(median(s.rss));
    r.hash = s.runs.front().logits_hash;
    if (s.plan.resident) {
      r.hit = r.prepared = kNaN;
      r.mib_per_token = r.used_mb_per_token = 0;
      r.disk_busy_mbs = kNaN;
      r.stall_pct = 0;
      r.cache_share = 1;
    } else {
      r.hit = col(s, [](const RunMeasure& m) {
        return m.selected ? static_cast<double>(m.hits) / static_cast<double>(m.selected) : kNaN;
      });
      r.prepared = col(s, [](const RunMeasure& m) {
        return m.selected ? static_cast<double>(m.hits + m.in_flight) / static_cast<double>(m.selected) : kNaN;
      });
      r.mib_per_token = col(s, [&](const RunMeasure& m) { return per_token(m, mib(static_cast<double>(m.bytes_read))); });
      r.used_mb_per_token = col(s, [&](const RunMeasure& m) {
        return per_token(m, static_cast<double>(m.bytes_read - std::min(m.bytes_read, m.bytes_wasted)) / 1e6);
      });
      r.disk_busy_mbs = col(s, [](const RunMeasure& m) {
        return m.io_busy_us ? static_cast<double>(m.io_bytes) / static_cast<double>(m.io_busy_us) : kNaN;
      });
      r.stall_pct = col(s, [](const RunMeasure& m) { return m.gen_s > 0 ? 100.0 * m.stall_s / m.gen_s : kNaN; });
      r.cache_share = static_cast<double>(s.runs.front().cache_bytes) /
                      static_cast<double>(std::max<uint64_t>(1, s.runs.front().expert_bytes_total));
    }
    if (!s.plan.drafter.empty()) {
      r.accepted_per_round = col(s, [](const RunMeasure& m) {
        return m.spec_rounds ? static_cast<double>(m.spec_accepted) / m.spec_rounds : kNaN;
      });
      r.acceptance = col(s, [](const RunMeasure& m) {
        return m.spec_drafted ? static_cast<double>(m.spec_accepted) / m.spec_drafted : kNaN;
      });
      r.drafted_per_round = col(s, [](const RunMeasure& m) {
        return m.spec_rounds ? static_cast<double>(m.spec_drafted) / m.spec_rounds : kNaN;
      });
      r.gave_up_at = col(s, [](const RunMeasure& m) { return m.spec_released_at >= 0 ? m.spec_released_at : kNaN; });
      for (const RunMeasure& m : s.runs) r.gave_up += m.spec_released_at >= 0 ? 1 : 0;
    } else {
      r.accepted_per_round = r.acceptance = r.drafted_per_round = r.gave_up_at = kNaN;
    }
    // The device probe's best bandwidth at the rows' queue depth (bursts after idle included),
    // through the row's own loader, beside the compute and with idle cores: a row above ~105% of
    // its ceiling read faster than the probe says the device can.
    const storage::DiskRates disk = s.plan.file == o.model
                                        ? (s.plan.io == storage::IoMode::naive ? rep.disk_original_naive : rep.disk_original)
                                    : s.plan.file == mixed_path && mixed_runs ? rep.disk_mixed
                                                                              : rep.disk_packed;
    r.ceiling_tps = s.plan.resident ? ceiling_tps(r.used_mb_per_token * 1e6, kNaN, compute_s[s.group])
                                    : ceiling_tps(r.used_mb_per_token * 1e6, disk.loaded_mbs * 1e6, compute_s[s.group],
                                                  disk.idle_mbs * 1e6);
    r.of_ceiling = ratio(r.decode_tps, r.ceiling_tps);
  }
  const RowResult* base = nullptr;
  const RowResult* prev = nullptr;
  for (RowResult& r : rep.rows) {
    if (r.kind == RowKind::baseline && r.ran) base = &r;
  }
  for (RowResult& r : rep.rows) {
    if (!r.ran) {
      r.decode_tps = r.prefill_tps = r.vs_baseline = r.vs_prev = r.hit = r.prepared = r.mib_per_token = kNaN;
      r.used_mb_per_token = r.disk_busy_mbs = r.stall_pct = r.peak_rss_mib = r.load_s = r.ttft_s = kNaN;
      r.ceiling_tps = r.of_ceiling = r.oracle_tps = r.of_oracle = r.cache_share = kNaN;
      r.accepted_per_round = r.acceptance = r.drafted_per_round = r.gave_up_at = kNaN;
      continue;
    }
    if (r.oracle_tps == 0) r.oracle_tps = kNaN;
    r.of_oracle = ratio(r.decode_tps, r.oracle_tps);
    r.vs_baseline = base ? ratio(r.decode_tps, base->decode_tps) : kNaN;
    r.vs_prev = kNaN;
    if (r.kind == RowKind::resident) continue;
    if (prev) {
      r.vs_prev = ratio(r.decode_tps, prev->decode_tps);
      r.prev = row_label(prev->kind);
    }
    prev = &r;
  }

  // --- what the reader needs to know ---
  rep.notes.push_back("Each (row, repeat) ran in its own process from a cold expert cache and a cold page cache for "
                      "the file it streams; peak RSS, load time and time to first token are that process's own "
                      "(wait4). TTFT = load + prefill + first token.");
  if (o.reps > 1) {
    rep.notes.push_back("The rows ran in the order shown in the warm-up and odd-numbered repeats and in reverse order "
                        "in even-numbered ones: a run that follows another run over the same file can read faster "
                        "(a VM host's cache), so a fixed order would favour the later row.");
  }
  rep.notes.push_back(strfmt("Ceiling = 1 / (t_compute + what the reads need beyond it): the MB per token the row used "
                             "(read minus prefetched-and-never-used) read at best beside the whole compute at the disk's "
                             "bandwidth while every core computes, the rest after it at its bandwidth with idle cores "
                             "(the device probe's best for that file's expert reads at queue depth <= %d through the "
                             "row's loader, burst after idle or sustained; the loaded figure is that times the share the "
                             "probe kept while every core computed; les probe shows both; the baseline and +lookahead "
                             "rows read through the naive buffered loader, and their probe reads the same way); "
                             "t_compute = %.2f ms per token, %s%s. The +speculation row's compute term is plain "
                             "decoding's, so speculation can pass 100%%.",
                             kDiskProbeQueueDepth, rep.compute_ms_per_token, rep.compute_source.c_str(),
                             mixed_runs ? strfmt("; for the mixed file's rows %.2f ms per token (%s)",
                                                 rep.compute_ms_per_token_mixed,
                                                 have_resident ? "a resident run of the mixed file in every repeat, "
                                                                 "not shown as a row"
                                                               : "its streamed rows' time not spent waiting")
                                                 .c_str()
                                        : ""));
  if (o.oracles) {
    rep.notes.push_back(strfmt("Routing oracle: the same row with the routing the warm-up's first streamed row of the "
                               "same weights recorded (identical across schedules) replayed as a perfect guess %d "
                               "layer%s ahead (routing_oracle.h).",
                               o.oracle_depth, o.oracle_depth == 1 ? "" : "s"));
  }
  if (spec_runs && drafter_kind != "oracle") {
    rep.notes.push_back("+speculation: the drafter's resident bytes count against the same budget: that share of "
                        "the expert cache is withheld (column cache: what is in use at the start) and goes in use "
                        "if the depth controller gives speculation up and frees the drafter, as in les run.");
  }
  rep.notes.push_back(strfmt("Published staging (the ratios in column 'published'): baseline %.2f, +lookahead %.2f, "
                             "+load optimization %.2f, +mixed precision %.2f, +speculation %.2f tok/s.",
                             published_tps(RowKind::baseline), published_tps(RowKind::lookahead),
                             published_tps(RowKind::loadopt), published_tps(RowKind::mixed),
                             published_tps(RowKind::spec)));
  rep.wall_s = now_s() - t_begin;
  return rep;
}

}  // namespace les::bench
