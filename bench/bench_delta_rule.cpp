// Prefill speed of a qwen35moe model with the token-by-token delta rule vs its chunked form, and
// how far apart their logits are. usage: bench_delta_rule -m MODEL [-p 512] [-t 2] [--reps 3]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <time.h>

#include "les/model/context.h"
#include "les/util/error.h"

using namespace les;

namespace {
// CPU time of the process (all threads): less sensitive than wall time to other load on the machine.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  int n_prompt = 512, threads = 2, reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "-m") model_path = next();
    else if (a == "-p") n_prompt = std::atoi(next().c_str());
    else if (a == "-t") threads = std::atoi(next().c_str());
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else {
      std::fprintf(stderr, "usage: bench_delta_rule -m MODEL [-p 512] [-t 2] [--reps 3]\n");
      return 2;
    }
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "usage: bench_delta_rule -m MODEL [-p 512] [-t 2] [--reps 3]\n");
    return 2;
  }
  try {
    auto m = Model::load(model_path);
    const int nv = m->config().n_vocab;
    std::vector<int32_t> prompt;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < n_prompt; ++i) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      prompt.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(nv - 8)));
    }
    std::vector<float> last[2];
    for (int chunked = 0; chunked < 2; ++chunked) {
      double best = 1e30, best_cpu = 1e30;
      for (int r = 0; r < reps; ++r) {
        Context ctx(*m, ContextParams{.n_ctx = n_prompt + 1, .n_threads = threads, .n_batch = n_prompt,
                                      .chunked_delta_rule = chunked != 0});
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_seconds();
        ctx.eval(prompt, false);
        best_cpu = std::min(best_cpu, cpu_seconds() - c0);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        last[chunked].assign(ctx.last_logits(), ctx.last_logits() + nv);
      }
      std::printf("%-25s prefill %d tokens: %.3f s wall (%.1f tok/s), %.3f s CPU, best of %d\n",
                  chunked ? "chunked delta rule" : "token-by-token recurrence", n_prompt, best, n_prompt / best,
                  best_cpu, reps);
    }
    double md = 0;
    for (int v = 0; v < nv; ++v) md = std::max(md, static_cast<double>(std::fabs(last[0][v] - last[1][v])));
    std::printf("max |logit diff| chunked vs recurrence at the last position: %.3g\n", md);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_delta_rule: %s\n", e.what());
    return 1;
  }
  return 0;
}
