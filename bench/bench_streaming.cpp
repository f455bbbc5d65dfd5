// Expert streaming benchmark: fully resident vs ondemand vs lookahead on the same model, prompt
// and budget, in one run, medians of repeats (the configurations take turns within each repeat,
// so drifts of the machine hit all of them alike). Also measures the disk's bandwidth for this
// model's expert reads and prints the decode ceiling per token (sched/io_probe.h).
//
//   bench_streaming -m MODEL --mem SIZE [-n TOKENS] [-t THREADS] [--reps R] [--io uring|pread|naive]
//                   [--policy lru] [--predict-extra M] [--prefetch-budget X] [--json FILE]
//                   [--configs resident,ondemand,lookahead,lookahead/inflight=8M/extra=1]
//
// A configuration is a schedule name optionally followed by /key=value overrides of the shared
// options: io (uring|pread|naive), file (packed: the --packed file, same budget; alt: the --alt file,
// another model of the same shape, e.g. quantized otherwise: its logits are not compared), extra (predict-extra), budget (prefetch-budget), inflight (prefetch bytes in flight),
// qd (queue depth), chunk (read shaping: an expert's extent in aligned reads of at most this size,
// as --read-chunk; whole: unchunked), policy, refine (on|off), cancel (refine-cancel on|off), ahead2 (measure
// the two-layers-ahead guess on|off), prefetch2 (prefetch it too, on|off), throttle (on|off),
// ahead2busy (the two-ahead prefetch's disk-busy limit), tf (throttle on with this factor), oracle (1..n_layer-1: replay a recorded routing as a perfect
// guess this many layers ahead; the bound any predictor could reach with this pipeline).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "les/sched/io_probe.h"
#include "les/model/context.h"
#include "les/sched/budget.h"
#include "les/sched/stream_report.h"
#include "les/sched/streaming_experts.h"
#include "les/storage/expert_layout.h"
#include "les/storage/io.h"
#include "les/util/error.h"
#include "les/util/hash.h"
#include "les/tokenizer/tokenizer.h"
#include <fstream>
#include <sstream>

using namespace les;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Args {
  std::string model;
  uint64_t mem = 0;
  int n_gen = 32;
  int n_prompt = 16;
  int threads = 2;
  int reps = 3;
  storage::IoMode io = storage::IoMode::uring;
  std::string policy = cache::kDefaultPolicy;
  int predict_extra = 0;
  double prefetch_budget = 1.5;
  int queue_depth = 8;
  uint64_t prefetch_inflight = 0;
  std::string json;
  std::string prompt_file;  // real text: the prompt is its first n_prompt tokens
  std::string packed;       // the same model packed by les pack (configurations with /file=packed)
  std::string alt;          // another model of the same shape (configurations with /file=alt)
  bool layers = false;      // print each configuration's per-layer table (its last repeat)
  std::vector<std::string> configs{"resident", "ondemand", "lookahead"};
};

uint64_t parse_mem(const std::string& s) {
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  std::string u = end;
  double m = 1;
  if (u == "K" || u == "k") m = 1024; else if (u == "M" || u == "m") m = 1048576; else if (u == "G" || u == "g") m = 1073741824.0;
  else if (!u.empty()) throw Error("bad --mem " + s);
  return static_cast<uint64_t>(x * m);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("missing value for " + k);
      return argv[++i];
    };
    if (k == "-m") a.model = val();
    else if (k == "--mem") a.mem = parse_mem(val());
    else if (k == "-n") a.n_gen = std::stoi(val());
    else if (k == "-p") a.n_prompt = std::stoi(val());
    else if (k == "-t") a.threads = std::stoi(val());
    else if (k == "--reps") a.reps = std::stoi(val());
    else if (k == "--io") a.io = storage::parse_io_mode(val());
    else if (k == "--policy") a.policy = val();
    else if (k == "--predict-extra") a.predict_extra = std::stoi(val());
    else if (k == "--prefetch-budget") a.prefetch_budget = std::stod(val());
    else if (k == "--queue-depth") a.queue_depth = std::stoi(val());
    else if (k == "--prefetch-inflight") a.prefetch_inflight = parse_mem(val());
    else if (k == "--configs") {
      a.configs.clear();
      std::stringstream ss(val());
      for (std::string c; std::getline(ss, c, ',');) if (!c.empty()) a.configs.push_back(c);
    }
    else if (k == "--packed") a.packed = val();
    else if (k == "--alt") a.alt = val();
    else if (k == "--json") a.json = val();
    else if (k == "--layers") a.layers = true;
    else if (k == "--prompt-file") a.prompt_file = val();
    else if (k == "-h" || k == "--help") {
      std::printf("usage: bench_streaming -m MODEL --mem SIZE [-n 32] [-p 16] [-t 2] [--reps 3] [--io uring|pread|naive]\n"
                  "       [--policy lru] [--predict-extra 0] [--prefetch-budget 1.5] [--queue-depth 8] [--prefetch-inflight SIZE]\n"
                  "       [--json FILE] [--prompt-file TEXT] [--packed PACKED.gguf] [--alt OTHER.gguf] [--configs resident,ondemand,lookahead[/key=value...]]\n"
                  "       [--layers]  (per-layer statistics of each configuration's last repeat)\n");
      std::exit(0);
    } else throw Error("unknown option " + k);
  }
  if (a.model.empty() || a.mem == 0) throw Error("need -m MODEL and --mem SIZE");
  return a;
}

struct Result {
  double tps = 0;           // decode tokens/s
  uint64_t hash = 0;        // final logits hash
  LayerStreamStats total{};
  uint64_t tokens = 0;
  double io_busy_s = 0;
  uint64_t io_bytes = 0;
  uint64_t io_reads = 0;    // read calls (syscalls or SQEs)
  double decode_s = 0;      // wall time of the decode phase
  double main_cpu_s = 0;    // CPU time of the decoding thread (less than decode_s: it waited or was preempted)
  long preempted = 0;       // involuntary context switches of the decoding thread
};

std::vector<int32_t> make_prompt(int n, int n_vocab) {
  std::mt19937 rng(1234);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min(n_vocab, 7990))));
  return p;
}

// Statistics cover the decode phase only (prefill routes many tokens per layer at once).
Result run_once(const Model& m, StreamingExperts* src, const Args& a, const std::vector<int32_t>& prompt) {
  Context ctx(m, ContextParams{.n_ctx = a.n_prompt + a.n_gen + 8, .n_threads = a.threads}, src);
  const int nv = m.config().n_vocab;
  ctx.eval(prompt, false);
  if (src) src->reset_stats();
  rusage u0{};
  getrusage(RUSAGE_THREAD, &u0);
  const double t0 = now_s();
  for (int i = 0; i < a.n_gen; ++i) {
    const float* lg = ctx.last_logits();
    const int32_t next = static_cast<int32_t>(std::max_element(lg, lg + nv) - lg);
    ctx.eval(std::span<const int32_t>(&next, 1), false);
  }
  Result r;
  r.decode_s = now_s() - t0;
  rusage u1{};
  getrusage(RUSAGE_THREAD, &u1);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  r.main_cpu_s = secs(u1.ru_utime) + secs(u1.ru_stime) - secs(u0.ru_utime) - secs(u0.ru_stime);
  r.preempted = u1.ru_nivcsw - u0.ru_nivcsw;
  r.tps = a.n_gen / r.decode_s;
  r.hash = hash64(ctx.last_logits(), sizeof(float) * static_cast<size_t>(nv));
  return r;
}


// Disk bandwidth for this model's expert reads at the runs' queue depth, while the cores compute
// and with idle cores (sched/io_probe.h; cached per device, measured when not cached).
storage::DiskRates measure_disk_mbs(const Model& m, const Args& a) {
  IoProbeOptions po;
  po.io_mode = a.io;
  const IoProbeResult r = probe_model_io(m, po);
  std::fprintf(stderr, "%s", storage::format_probe(r.probe).c_str());
  return r.probe.rates(a.queue_depth);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    // Mapped, not read into memory the process owns: the streamed runs beside it must find the
    // memory of their budget (a mapping's page cache is reclaimable).
    auto resident = Model::load(a.model, LoadOptions{.map_experts = true, .resident = ResidentMemory::map});
    auto streamed = Model::load(a.model, LoadOptions{.map_experts = false});
    const ModelConfig& c = resident->config();
    std::vector<int32_t> prompt = make_prompt(a.n_prompt, c.n_vocab);
    if (!a.prompt_file.empty()) {
      std::ifstream f(a.prompt_file, std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      Tokenizer tok(vocab_from_gguf(resident->gguf()));
      prompt = tok.encode(ss.str().substr(0, 64 * static_cast<size_t>(a.n_prompt)), false, false);
      if (static_cast<int>(prompt.size()) > a.n_prompt) prompt.resize(static_cast<size_t>(a.n_prompt));
      if (prompt.empty()) throw Error("empty prompt file " + a.prompt_file);
    }
    const BudgetPlan plan = plan_budget(*streamed, a.mem, a.n_prompt + a.n_gen + 8, 256,
                                        StreamingExperts::layer_slot_bytes_for(*streamed, a.io));
    uint64_t all_experts = 0;
    for (int l = 0; l < c.n_layer; ++l) all_experts += streamed->expert_size(l) * static_cast<uint64_t>(c.n_expert);
    std::printf("model %s: %d layers, %d experts (k=%d), expert %.2f MiB; %s\n", a.model.c_str(), c.n_layer, c.n_expert,
                c.n_expert_used, streamed->expert_size(0) / 1048576.0, plan.describe().c_str());
    std::printf("cache holds %.1f%% of the experts; %d threads, %d prompt + %d decode tokens, %d reps, io %s\n",
                100.0 * static_cast<double>(plan.cache) / static_cast<double>(all_experts), a.threads, a.n_prompt,
                a.n_gen, a.reps, storage::io_mode_name(a.io));

    // Configurations: name[/key=value...].
    std::unique_ptr<Model> packed;
    if (!a.packed.empty()) packed = Model::load(a.packed, LoadOptions{.map_experts = false});
    std::unique_ptr<Model> alt;
    if (!a.alt.empty()) {
      alt = Model::load(a.alt, LoadOptions{.map_experts = false});
      const ModelConfig& ac = alt->config();
      if (ac.n_layer != c.n_layer || ac.n_expert != c.n_expert || ac.n_embd != c.n_embd || ac.n_vocab != c.n_vocab) {
        throw Error("--alt " + a.alt + " is not of the same shape as " + a.model);
      }
    }
    struct Config {
      std::string label;
      bool resident = false;
      const Model* model = nullptr;
      StreamingOptions opt;
    };
    std::vector<Config> configs;
    for (const std::string& spec : a.configs) {
      Config cf;
      cf.label = spec;
      std::stringstream ss(spec);
      std::string name;
      std::getline(ss, name, '/');
      StreamingOptions& o = cf.opt;
      cf.model = streamed.get();
      o.io_mode = a.io;
      o.cache_bytes = plan.cache;
      o.policy = a.policy;
      o.predict_extra = a.predict_extra;
      o.prefetch_budget = a.prefetch_budget;
      o.queue_depth = a.queue_depth;
      o.prefetch_inflight = a.prefetch_inflight;
      if (name == "resident") cf.resident = true;
      else o.schedule = parse_schedule(name);
      for (std::string kv; std::getline(ss, kv, '/');) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) throw Error("bad configuration override '" + kv + "' in " + spec);
        const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
        if (k == "extra") o.predict_extra = std::stoi(v);
        else if (k == "budget") o.prefetch_budget = std::stod(v);
        else if (k == "inflight") o.prefetch_inflight = parse_mem(v);
        else if (k == "qd") o.queue_depth = std::stoi(v);
        else if (k == "chunk") o.read_chunk = v == "whole" ? 0 : parse_mem(v);
        else if (k == "policy") o.policy = v;
        else if (k == "io") o.io_mode = storage::parse_io_mode(v);
        else if (k == "file" && v == "packed") {
          if (!packed) throw Error("configuration " + spec + " needs --packed FILE");
          cf.model = packed.get();
        }
        else if (k == "file" && v == "alt") {
          if (!alt) throw Error("configuration " + spec + " needs --alt FILE");
          cf.model = alt.get();
        }
        else if (k == "refine") o.refine = v == "on";
        else if (k == "cancel") o.refine_cancel = v == "on";
        else if (k == "ahead2") o.measure_ahead2 = v == "on";
        else if (k == "prefetch2") o.prefetch_ahead2 = v == "on";
        else if (k == "throttle") o.throttle = v == "on";
        else if (k == "reaper") o.io_completion_thread = v == "on" ? 1 : 0;
        else if (k == "ahead2busy") o.ahead2_max_busy = std::stod(v);
        else if (k == "tf") { o.throttle = true; o.throttle_factor = std::stod(v); }
        else if (k == "oracle") {
          o.oracle_depth = std::stoi(v);
          if (o.oracle_depth < 1 || o.oracle_depth >= cf.model->config().n_layer) {
            throw Error("oracle depth must be 1 .. n_layer-1 in " + spec);
          }
          o.oracle = std::make_shared<RoutingOracle>(cf.model->config().n_layer);
        }
        else throw Error("unknown configuration key '" + k + "' in " + spec);
      }
      // The same budget for every configuration: the cache gets what the budget leaves for this
      // file's slots under this I/O mode.
      o.cache_bytes = plan_budget(*cf.model, a.mem, a.n_prompt + a.n_gen + 8, 256,
                                  StreamingExperts::layer_slot_bytes_for(*cf.model, o.io_mode)).cache;
      configs.push_back(cf);
    }
    // Oracle configurations replay the routing of a recording run (same prompt and generation,
    // so the same routing: the logits hash shows it).
    for (const Config& cf : configs) {
      if (!cf.opt.oracle) continue;
      StreamingOptions rec = cf.opt;
      rec.schedule = Schedule::ondemand;
      rec.oracle_record = true;
      StreamingExperts ex(*cf.model, rec);
      run_once(*cf.model, &ex, a, prompt);
    }
    std::vector<std::vector<Result>> runs(configs.size());
    // Odd-numbered repeats run the configurations in reverse: on a VM a run right after another
    // run over the same file can read faster (the host caches), which a fixed order would give to
    // the same configurations every time.
    for (int rep = 0; rep < a.reps; ++rep) {
      for (size_t k = 0; k < configs.size(); ++k) {
        const size_t ci = rep % 2 ? configs.size() - 1 - k : k;
        const Config& cf = configs[ci];
        if (cf.resident) {
          runs[ci].push_back(run_once(*resident, nullptr, a, prompt));
          continue;
        }
        StreamingExperts ex(*cf.model, cf.opt);
        Result r = run_once(*cf.model, &ex, a, prompt);
        ex.on_token_done();
        r.total = ex.stats().total();
        r.tokens = ex.stats().tokens;
        r.io_busy_s = ex.stats().io.busy_us / 1e6;
        r.io_bytes = ex.stats().io.bytes;
        r.io_reads = ex.stats().io.syscalls;
        runs[ci].push_back(r);
        if (a.layers && rep + 1 == a.reps) {
          RunSummary sum;
          sum.decode_tps = r.tps;
          sum.wall_s = r.decode_s;
          sum.n_tokens = r.tokens;
          std::printf("\n%s, last repeat:\n%s", cf.label.c_str(), format_stream_table(ex.stats(), sum).c_str());
        }
      }
    }
    std::vector<Result> med;
    for (auto& rs : runs) {
      std::sort(rs.begin(), rs.end(), [](const Result& x, const Result& y) { return x.tps < y.tps; });
      med.push_back(rs[rs.size() / 2]);
    }
    const storage::DiskRates disk_mbs = measure_disk_mbs(*streamed, a);
    const double disk = disk_mbs.loaded_mbs;

    auto find = [&](const char* label) -> const Result* {
      for (size_t i = 0; i < configs.size(); ++i) if (configs[i].label == label) return &med[i];
      return nullptr;
    };
    const Result* res = find("resident");
    const Result* odp = find("ondemand");
    if (!odp) throw Error("--configs must include ondemand (the reference for ratios and the ceiling)");
    const Result& od = *odp;
    // Compute time per token: the resident run's, or the ondemand run's time not spent waiting for
    // reads, whichever is smaller (a model larger than the page cache makes the resident run
    // page-fault bound).
    const double od_compute = (od.decode_s - od.total.stall_s) / a.n_gen;
    const double t_compute = res ? std::min(1.0 / res->tps, od_compute) : od_compute;
    const double must_read_mb = static_cast<double>(od.total.bytes_demand) / 1e6 / static_cast<double>(od.tokens);
    const double t_io = must_read_mb / disk;
    const double ceiling = 1.0 / decode_ceiling_seconds(must_read_mb * 1e6, t_compute, disk, disk_mbs.idle_mbs);
    auto line = [&](const std::string& name, const Result& r) {
      const LayerStreamStats& t = r.total;
      const double tok = r.tokens ? static_cast<double>(r.tokens) : 1.0;
      std::printf("%-34s %7.2f tok/s  x%.2f vs ondemand  %5.1f%% of ceiling  hit %5.1f%%  prepared %5.1f%%  recall@k %.3f refined %.3f ahead2 %.3f  "
                  "MB/tok demand %.2f prefetch %.2f wasted %.2f  throttled/tok %.1f  ms/tok stall %.1f compute %.1f  hash %s\n",
                  name.c_str(), r.tps, r.tps / od.tps, 100.0 * r.tps / ceiling,
                  t.selected ? 100.0 * t.hits / t.selected : 100.0,
                  t.selected ? 100.0 * (t.hits + t.in_flight) / t.selected : 100.0,
                  t.selected ? static_cast<double>(t.raw_pred_hits_k) / t.selected : 0.0,
                  t.selected ? static_cast<double>(t.raw_refined_hits_k) / t.selected : 0.0,
                  t.ahead2_selected ? static_cast<double>(t.raw_ahead2_hits_k) / t.ahead2_selected : 0.0,
                  t.bytes_demand / 1e6 / tok, t.bytes_prefetch / 1e6 / tok, t.bytes_wasted / 1e6 / tok,
                  static_cast<double>(t.prefetch_throttled) / tok,
                  1e3 * t.stall_s / tok, 1e3 * t.compute_s / tok, hex64(r.hash).c_str());
    };
    std::printf("\ndisk: %.0f MB/s for this model's expert reads (queue depth %d) while the cores compute; %.0f MB/s "
                "with idle cores\n",
                disk, a.queue_depth, disk_mbs.idle_mbs);
    std::printf("ceiling: %.2f MB/tok must-read, at best beside the whole compute at the first disk figure (t_io %.2f "
                "ms) and the rest after it at the second, t_compute %.2f ms (resident %s, ondemand minus stalls %.2f) "
                "-> %.2f tok/s (sched/io_probe.h decode_ceiling_seconds)\n\n",
                must_read_mb, 1e3 * t_io, 1e3 * t_compute, res ? strfmt("%.2f", 1e3 / res->tps).c_str() : "not run",
                1e3 * od_compute, ceiling);
    bool same = true;
    for (size_t i = 0; i < configs.size(); ++i) {
      line(configs[i].label, med[i]);
      if (configs[i].model != alt.get() || !alt) same = same && med[i].hash == od.hash;
    }
    std::printf("\nI/O per configuration (decode phase):\n");
    for (size_t i = 0; i < configs.size(); ++i) {
      const Result& r = med[i];
      if (configs[i].resident || !r.tokens) continue;
      const double tok = static_cast<double>(r.tokens);
      std::printf("%-34s %s %-5s %-8s read calls/token %7.1f  MB/token %7.2f  MB/s while busy %6.0f  busy %4.1f%% of decode"
                  "  decoding thread CPU %.1f ms/token, preempted %.1f/token\n",
                  configs[i].label.c_str(),
                  configs[i].model == alt.get() && alt ? (alt->packed() ? "alt,pack" : "alt     ")
                  : configs[i].model->packed() ? "packed  " : "original",
                  storage::io_mode_name(configs[i].opt.io_mode), schedule_name(configs[i].opt.schedule),
                  static_cast<double>(r.io_reads) / tok, static_cast<double>(r.io_bytes) / 1e6 / tok,
                  r.io_busy_s > 0 ? static_cast<double>(r.io_bytes) / 1e6 / r.io_busy_s : 0.0,
                  r.decode_s > 0 ? 100.0 * r.io_busy_s / r.decode_s : 0.0, 1e3 * r.main_cpu_s / tok,
                  static_cast<double>(r.preempted) / tok);
    }
    std::printf("\nlogits identical across all configurations%s: %s\n", alt ? " of the main model (--alt: another model)" : "",
                same ? "yes" : "NO");
    if (!a.json.empty()) {
      FILE* f = std::fopen(a.json.c_str(), "w");
      if (f) {
        std::fprintf(f, "{\"model\": \"%s\", \"mem\": %llu, \"threads\": %d, \"disk_mb_s\": %.1f, \"t_io_ms\": %.3f, "
                        "\"t_compute_ms\": %.3f, \"ceiling_tok_s\": %.3f, \"configs\": {",
                     a.model.c_str(), static_cast<unsigned long long>(a.mem), a.threads, disk, 1e3 * t_io,
                     1e3 * t_compute, ceiling);
        for (size_t i = 0; i < configs.size(); ++i) {
          std::fprintf(f, "%s\"%s\": %.3f", i ? ", " : "", configs[i].label.c_str(), med[i].tps);
        }
        std::fprintf(f, "}, \"identical\": %s}\n", same ? "true" : "false");
        std::fclose(f);
      }
    }
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_streaming: %s\n", e.what());
    return 1;
  }
}
