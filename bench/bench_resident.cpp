// Fully resident prefill and decode speed of les next to llama.cpp on the same file, thread
// count, prompt length and decode length, in one run (medians of repeats). llama.cpp is run via
// tools/llamacpp-ref/bench.mjs (node-llama-cpp) when installed. --isa runs les once per listed
// kernel ISA, the ISAs interleaved within each repeat (the first one is compared to llama.cpp).
// --rounds K alternates K rounds of (les repeats, llama.cpp repeats) and takes the medians over
// all of them, so that both engines sample a shared machine's changing load alike; the load
// average is printed before and after. --memory lists how the model file becomes memory (model.h:
// read = into huge pages, map = mmap; default: the automatic choice); with both, les runs every
// ISA once per mode (one model loaded per mode), interleaved, the first mode's first ISA compared.
//
// --ctk/--ctv set les's KV cache types (default f32, as the llama.cpp reference runs: F32 cache,
// no flash attention; any other type runs llama.cpp with that type and flash attention on).
// --depth D measures decode at context depth D: after the prompt, the KV cache is filled to D
// positions by repeating the prompt's rows (Context::repeat_positions; decode speed does not
// depend on what the rows hold), then n tokens are decoded (les only: llama.cpp's side is
// tools/llamacpp-depth).
//
//   bench_resident -m MODEL [-t 2] [-p 128] [-n 64] [--reps 5] [--rounds 1] [--isa avx512,avx2] [--no-llamacpp]
//                  [--memory read,map] [--ctk T] [--ctv T] [--depth D] [--json FILE]
#include <algorithm>
#include <memory>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "les/model/context.h"
#include "les/model/kv_cache.h"
#include "les/quant/kernels.h"
#include "les/util/clock.h"
#include "les/util/error.h"

using namespace les;

namespace {

// The 1-, 5- and 15-minute load averages (a shared machine's load at the time of a run).
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, json_out;
  int threads = 2, n_prompt = 128, n_gen = 64, reps = 5, rounds = 1, depth = 0;
  Type type_k = Type::F32, type_v = Type::F32;
  bool run_llamacpp = true;
  std::vector<Isa> isas;
  std::vector<ResidentMemory> memories;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "-m") model_path = val();
    else if (k == "-t") threads = std::stoi(val());
    else if (k == "-p") n_prompt = std::stoi(val());
    else if (k == "-n") n_gen = std::stoi(val());
    else if (k == "--reps") reps = std::stoi(val());
    else if (k == "--rounds") rounds = std::max(1, std::stoi(val()));
    else if (k == "--no-llamacpp") run_llamacpp = false;
    else if (k == "--json") json_out = val();
    else if (k == "--depth") depth = std::stoi(val());
    else if (k == "--ctk" || k == "--ctv") {
      try {
        (k == "--ctk" ? type_k : type_v) = parse_kv_type(val(), k.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_resident: %s\n", e.what());
        return 2;
      }
    }
    else if (k == "--memory") {
      std::stringstream ss(val());
      std::string name;
      try {
        while (std::getline(ss, name, ',')) memories.push_back(parse_resident_memory(name));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_resident: %s\n", e.what());
        return 2;
      }
    }
    else if (k == "--isa") {
      std::stringstream ss(val());
      std::string name;
      while (std::getline(ss, name, ',')) {
        Isa isa;
        if (!parse_isa(name.c_str(), isa) || !isa_supported(isa)) {
          std::fprintf(stderr, "bench_resident: ISA '%s' unknown or not supported by this CPU\n", name.c_str());
          return 2;
        }
        isas.push_back(isa);
      }
    }
    else {
      std::fprintf(stderr,
                   "usage: bench_resident -m MODEL [-t 2] [-p 128] [-n 64] [--reps 5] [--rounds 1] [--isa avx512,avx2] [--no-llamacpp] [--memory read,map] "
                   "[--ctk T] [--ctv T] [--depth D] [--json FILE]\n");
      return 2;
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "bench_resident: -m MODEL is required\n");
    return 2;
  }
  if (depth > 0 && depth <= n_prompt) {
    std::fprintf(stderr, "bench_resident: --depth must be more than the prompt (-p %d)\n", n_prompt);
    return 2;
  }
  if (depth > 0) run_llamacpp = false;  // llama.cpp at depth: tools/llamacpp-depth
  try {
    if (memories.empty()) memories.push_back(ResidentMemory::automatic);
    std::vector<std::unique_ptr<Model>> models;
    for (ResidentMemory mem : memories) {
      models.push_back(Model::load(model_path, LoadOptions{.map_experts = true, .resident = mem}));
      const Model& lm = *models.back();
      std::printf("model memory: %s%s", resident_memory_name(lm.resident_memory()),
                  mem == ResidentMemory::automatic ? " (automatic)" : "");
      if (lm.resident_memory() == ResidentMemory::read) std::printf(", read in %.2f s", lm.resident_read_seconds());
      std::printf("\n");
    }
    const Model* m = models[0].get();
    const ModelConfig& c = m->config();
    std::mt19937 rng(42);
    std::vector<int32_t> prompt;
    for (int i = 0; i < n_prompt; ++i) prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(std::max(2, c.n_vocab - 300))));
    if (isas.empty()) isas.push_back(kernels().isa);
    const std::string load_before = load_average();
    // Variant k: model k / isas.size(), ISA k % isas.size().
    const size_t n_var = models.size() * isas.size();
    std::vector<std::vector<double>> pre(n_var), dec(n_var);
    std::vector<double> ll_pre, ll_dec;
    bool llama_failed = false;
    std::string llama_cmd;
    for (int round = 0; round < rounds; ++round) {
      for (int r = 0; r < reps + 1; ++r) {
        for (size_t k = 0; k < n_var; ++k) {
          set_active_isa(isas[k % isas.size()]);
          Context ctx(*models[k / isas.size()], ContextParams{.n_ctx = std::max(n_prompt, depth) + n_gen + 8,
                                                              .n_threads = threads, .n_batch = n_prompt,
                                                              .type_k = type_k, .type_v = type_v});
          double t0 = now_s();
          ctx.eval(prompt, false);
          const double tp = now_s() - t0;
          if (depth > 0) ctx.repeat_positions(depth);
          t0 = now_s();
          for (int i = 0; i < n_gen; ++i) {
            const float* lg = ctx.last_logits();
            const int32_t next = static_cast<int32_t>(std::max_element(lg, lg + c.n_vocab) - lg);
            ctx.eval(std::span<const int32_t>(&next, 1), false);
          }
          const double td = now_s() - t0;
          if (r == 0) continue;  // warm-up
          pre[k].push_back(n_prompt / tp);
          dec[k].push_back(n_gen / td);
        }
      }
      if (run_llamacpp && !llama_failed) {
        const std::string tmp = "/tmp/bench_resident_llamacpp.json";
        llama_cmd = std::string("node ") + LES_BENCH_SOURCE_DIR + "/tools/llamacpp-ref/bench.mjs --model '" + model_path +
                    "' --threads " + std::to_string(threads) + " -n " + std::to_string(n_gen) + " --prompt-tokens " +
                    std::to_string(n_prompt) + " --repeats " + std::to_string(reps) + " --json " + tmp +
                    (type_k != Type::F32 || type_v != Type::F32
                         ? " --cache-type-k " + kv_type_name(type_k) + " --cache-type-v " + kv_type_name(type_v)
                         : std::string()) +
                    " > /dev/null 2>&1";
        if (std::system(llama_cmd.c_str()) == 0) {
          std::ifstream f(tmp);
          const auto j = nlohmann::json::parse(f);
          for (double v : j["llama_internal"]["prefill_s"]) ll_pre.push_back(n_prompt / v);
          for (double v : j["llama_internal"]["decode_s"]) ll_dec.push_back(n_gen / v);
        } else {
          llama_failed = true;
        }
      }
    }
    const double active = static_cast<double>(m->dense_bytes()) +
                          static_cast<double>(c.n_expert_used) * static_cast<double>(m->expert_size(0)) * c.n_layer;
    std::printf("model %s (%s), %d threads, prompt %d, decode %d%s, KV %s/%s, %d reps x %d rounds, load average %s -> %s\n",
                model_path.c_str(), c.arch_str.c_str(), threads, n_prompt, n_gen,
                depth > 0 ? (" at depth " + std::to_string(depth)).c_str() : "", kv_type_name(type_k).c_str(),
                kv_type_name(type_v).c_str(), reps, rounds, load_before.c_str(), load_average().c_str());
    for (size_t k = 0; k < n_var; ++k) {
      const char* mem = models.size() > 1 ? resident_memory_name(models[k / isas.size()]->resident_memory()) : "";
      std::printf("les %-8s%-5s prefill %8.2f tok/s   decode %7.2f tok/s   (%.1f GB/s of weights touched per decoded token)\n",
                  isa_name(isas[k % isas.size()]), mem, median(pre[k]), median(dec[k]), active * median(dec[k]) / 1e9);
    }
    const double les_pre = median(pre[0]), les_dec = median(dec[0]);
    nlohmann::json out = {{"model", model_path}, {"threads", threads}, {"prompt", n_prompt}, {"decode", n_gen},
                          {"rounds", rounds}, {"isa", isa_name(isas[0])}, {"depth", depth},
                          {"cache_type_k", kv_type_name(type_k)}, {"cache_type_v", kv_type_name(type_v)},
                          {"memory", resident_memory_name(m->resident_memory())}, {"les_prefill_tok_s", les_pre},
                          {"les_decode_tok_s", les_dec}, {"active_bytes_per_token", active}};
    if (run_llamacpp && !llama_failed && !ll_pre.empty() && !ll_dec.empty()) {
      const double lp = median(ll_pre), ld = median(ll_dec);
      std::printf("llama.cpp         prefill %8.2f tok/s   decode %7.2f tok/s   (llama.cpp's own counters)\n", lp, ld);
      std::printf("ratio les/llama.cpp: prefill %.2fx   decode %.2fx\n", les_pre / lp, les_dec / ld);
      out["llamacpp_prefill_tok_s"] = lp;
      out["llamacpp_decode_tok_s"] = ld;
      out["ratio_decode"] = les_dec / ld;
      out["ratio_prefill"] = les_pre / lp;
    } else if (run_llamacpp) {
      std::printf("llama.cpp: not run (node-llama-cpp missing or failed: %s)\n", llama_cmd.c_str());
    }
    if (!json_out.empty()) std::ofstream(json_out) << out.dump(1) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_resident: %s\n", e.what());
    return 1;
  }
}
