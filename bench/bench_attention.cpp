// Decode attention over a KV cache at depth: one query token (n = 1) against D cached positions
// per layer, for each KV cache type, on the 30B-A3B shape's attention (32 query heads, 4 KV heads
// of 128) by default. Prints the median time per layer and the cache bytes it reads per second.
//
//   bench_attention [--depth 32768] [-t 2] [--heads 32] [--kv-heads 4] [--head-dim 128] [--reps 20]
//                   [--types f32,f16,q8_0,q4_0]
#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "les/model/attention_core.h"
#include "les/model/kv_cache.h"
#include "les/util/clock.h"
#include "les/util/error.h"

using namespace les;

int main(int argc, char** argv) {
  int depth = 32768, threads = 2, n_head = 32, n_head_kv = 4, hd = 128, reps = 20;
  std::string types = "f32,f16,bf16,q8_0,q4_0,iq4_nl";
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--depth") depth = std::stoi(val());
    else if (k == "-t") threads = std::stoi(val());
    else if (k == "--heads") n_head = std::stoi(val());
    else if (k == "--kv-heads") n_head_kv = std::stoi(val());
    else if (k == "--head-dim") hd = std::stoi(val());
    else if (k == "--reps") reps = std::stoi(val());
    else if (k == "--types") types = val();
    else {
      std::fprintf(stderr, "usage: bench_attention [--depth D] [-t N] [--heads H] [--kv-heads G] [--head-dim D] [--reps R] [--types T,...]\n");
      return 2;
    }
  }
  try {
    ThreadPool pool(threads);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t width = int64_t(n_head_kv) * hd;
    std::vector<float> rows(static_cast<size_t>(depth) * static_cast<size_t>(width));
    for (float& x : rows) x = nd(rng);
    std::vector<float> q(static_cast<size_t>(n_head) * hd), out(q.size());
    for (float& x : q) x = nd(rng);
    std::printf("decode attention: depth %d, %d query heads, %d KV heads of %d, %d threads, median of %d\n", depth, n_head,
                n_head_kv, hd, threads, reps);
    std::stringstream ss(types);
    std::string name;
    while (std::getline(ss, name, ',')) {
      const Type t = parse_kv_type(name, "--types");
      KvRows k, v;
      k.allocate(1, depth + 1, width, hd, t);
      v.allocate(1, depth + 1, width, hd, t);
      k.write(0, 0, rows.data(), depth);
      v.write(0, 0, rows.data(), depth);
      AttentionShape s{n_head, n_head_kv, hd, hd, 1.0f / 11.3137f};
      std::vector<double> ts;
      for (int r = 0; r < reps + 2; ++r) {
        const double t0 = now_s();
        causal_attention(s, q.data(), n_head * hd, k.view(0), v.view(0), 1, depth - 1, out.data(), pool);
        if (r >= 2) ts.push_back(now_s() - t0);
      }
      std::sort(ts.begin(), ts.end());
      const double med = ts[ts.size() / 2];
      const double bytes = 2.0 * static_cast<double>(depth) * static_cast<double>(k.row_bytes());
      std::printf("  %-7s %8.3f ms per layer   %6.2f GB/s of cache read\n", kv_type_name(t).c_str(), med * 1e3,
                  bytes / med / 1e9);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
}
