#include "les/sched/io_probe.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include "les/quant/kernels.h"
#include "les/quant/types.h"
#include "les/storage/expert_layout.h"
#include "les/util/error.h"
#include "les/util/progress.h"

namespace les {

namespace {

// The probe's load: the decode's kind of compute, Q4_K matrix-vector products with the active
// ISA's kernels over 8 MiB of weights per thread (about the L3 share of a core), until stop.
void decode_like_load(const std::atomic<bool>& stop) {
  constexpr int64_t kCols = 4096, kTile = 64;
  const size_t rb = row_bytes(Type::Q4_K, kCols);
  const int64_t rows = static_cast<int64_t>((size_t{8} << 20) / rb) / kTile * kTile;
  std::vector<float> x(static_cast<size_t>(kCols));
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& v : x) v = g(rng);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  quantize_row_ref(Type::Q4_K, x.data(), w.data(), kCols);
  for (int64_t r = 1; r < rows; ++r) std::copy_n(w.data(), rb, w.data() + rb * static_cast<size_t>(r));
  const KernelTable& k = kernels();
  const Type at = act_type(Type::Q4_K);
  std::vector<uint8_t> a(row_bytes(at, kCols));
  k.quantize[static_cast<size_t>(at)](x.data(), a.data(), kCols);
  std::vector<float> y(static_cast<size_t>(kTile));
  while (!stop.load(std::memory_order_relaxed)) {
    for (int64_t r = 0; r < rows && !stop.load(std::memory_order_relaxed); r += kTile) {
      gemm_rows(k, Type::Q4_K, kCols, w.data() + rb * static_cast<size_t>(r), rb, kTile, a.data(), a.size(), 1,
                y.data(), kTile);
    }
  }
}

}  // namespace

std::vector<storage::ExpertExtents> model_expert_extents(const Model& model, size_t alignment) {
  const ExpertLayout layout(model, alignment);
  std::vector<storage::ExpertExtents> out;
  for (int l = 0; l < layout.n_layer(); ++l) {
    if (!layout.has_experts(l)) continue;
    for (int e = 0; e < layout.n_expert(); ++e) {
      storage::ExpertExtents ex;
      for (const SlotRead& r : layout.reads(l, e)) ex.push_back(storage::AlignedExtent{r.file_offset, r.length, 0});
      if (!ex.empty()) out.push_back(std::move(ex));
    }
  }
  return out;
}

IoProbeResult probe_model_io(const Model& model, const IoProbeOptions& o) {
  std::shared_ptr<storage::ReadFile> file = o.file;
  if (!file) {
    file = o.io_mode == storage::IoMode::naive ? storage::open_buffered(model.path()) : storage::open_direct(model.path());
  }
  const std::vector<storage::ExpertExtents> experts = model_expert_extents(model, file->alignment());
  if (experts.empty()) throw Error(strfmt("%s has no routed experts to probe the disk with", model.path().c_str()));
  const uint64_t expert_bytes = storage::expert_read_bytes(experts);
  const bool cacheable = o.io_mode != storage::IoMode::fake && !o.cache_path.empty() && !o.quick;
  const std::string device = storage::device_key(file->path());
  const std::string mode = storage::io_mode_name(o.io_mode);
  if (cacheable && !o.refresh) {
    if (auto p = storage::load_cached_probe(o.cache_path, device, file->alignment(), expert_bytes, mode)) {
      if (p->taken_busy() && o.progress) {
        std::fprintf(stderr,
                     "les: warning: the cached disk probe for %s was taken while other work had %.0f%% of the CPU "
                     "time; its ceilings may be low (--probe-refresh on a quieter machine measures again)\n",
                     model.path().c_str(), 100 * p->other_cpu);
      }
      return IoProbeResult{std::move(*p), true};
    }
  }
  storage::ProbeOptions po;
  po.io_mode = o.io_mode;
  po.io = o.io;
  po.register_buffers = o.register_buffers;
  po.experts_per_layer = model.config().n_expert;  // model_expert_extents is layer-major
  po.experts_per_token = model.config().n_expert_used;
  if (o.loaded) {
    po.load_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    po.load = decode_like_load;
  }
  if (o.quick) {
    po.depths = {1, 2, 4, 8, 16};
    po.point_seconds = 0.06;
    po.idle_seconds = 0.02;
    po.warm_set_bytes = uint64_t{8} << 20;
  }
  std::unique_ptr<Progress> bar;
  if (o.progress) {
    std::fprintf(stderr, "les: measuring the disk for %s (once per device; cached in %s)\n", model.path().c_str(),
                 cacheable ? o.cache_path.c_str() : "no cache");
    bar = std::make_unique<Progress>("disk probe", 1);
    po.progress = [&](size_t done, size_t total) {
      bar->set_total(total);
      bar->update(done);
    };
  }
  IoProbeResult r{storage::probe_device(file, experts, po), false};
  if (bar) bar->finish();
  if (r.probe.taken_busy() && o.progress) {
    std::fprintf(stderr,
                 "les: warning: other work had %.0f%% of the CPU time while the disk was probed; the probe may "
                 "under-measure the disk (ceilings too low)\n",
                 100 * r.probe.other_cpu);
  }
  if (cacheable) {
    try {
      if (!storage::save_cached_probe(o.cache_path, r.probe) && o.progress) {
        std::fprintf(stderr, "les: the cache keeps its probe of this disk from a quieter machine (%s)\n",
                     o.cache_path.c_str());
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "les: warning: the device probe was not cached: %s\n", e.what());
    }
  }
  return r;
}

IoProbeOptions io_probe_options_for(const StreamingOptions& so) {
  IoProbeOptions o;
  o.io_mode = so.io_mode;
  o.io = so.io;
  o.file = so.file;
  o.register_buffers = so.register_buffers;
  return o;
}

double decode_ceiling_seconds(double bytes, double t_compute, double loaded_mbs, double idle_mbs) {
  t_compute = std::max(0.0, t_compute);
  if (!(loaded_mbs > 0)) return t_compute;
  const double idle = idle_mbs > loaded_mbs ? idle_mbs : loaded_mbs;
  const double overlapped = loaded_mbs * 1e6 * t_compute;  // bytes the disk gives beside the compute
  return bytes <= overlapped ? t_compute : t_compute + (bytes - overlapped) / (idle * 1e6);
}

IoCeiling io_ceiling(uint64_t bytes, double stall_s, double seconds, uint64_t tokens, storage::DiskRates disk) {
  IoCeiling c;
  if (tokens == 0 || seconds <= 0 || disk.loaded_mbs <= 0) return c;
  const double n = static_cast<double>(tokens);
  c.mb_per_token = static_cast<double>(bytes) / 1e6 / n;
  c.disk_mbs = disk.loaded_mbs;
  c.idle_mbs = std::max(disk.idle_mbs, disk.loaded_mbs);
  c.t_io_s = c.mb_per_token / c.disk_mbs;
  c.t_compute_s = std::max(0.0, seconds - stall_s) / n;
  c.tps = n / seconds;
  const double t = decode_ceiling_seconds(c.mb_per_token * 1e6, c.t_compute_s, c.disk_mbs, c.idle_mbs);
  c.ceiling_tps = t > 0 ? 1.0 / t : 0.0;
  c.of_ceiling = c.ceiling_tps > 0 ? c.tps / c.ceiling_tps : 0.0;
  return c;
}

std::string format_io_ceiling(const IoCeiling& c, int queue_depth) {
  return strfmt("ceiling (decode): %.2f MB/token read at %.0f MB/s beside the compute and %.0f MB/s with idle cores "
                "(the device probe's best at queue depth <= %d; t_io %.2f ms at the first), t_compute %.2f ms (the "
                "time per token not waiting for reads) = %.1f tok/s; decode %.1f tok/s = %.0f%% of it\n",
                c.mb_per_token, c.disk_mbs, c.idle_mbs, queue_depth, 1e3 * c.t_io_s, 1e3 * c.t_compute_s,
                c.ceiling_tps, c.tps, 100 * c.of_ceiling) +
         (c.of_ceiling > 1.05 ? "  above 105%: the reads ran faster than the device probe measured the disk (a probe "
                                "taken on a busy machine, or a disk that changed speed); --probe-refresh measures again\n"
                              : "");
}

int experts_in_flight(const StreamingOptions& so, const Model& model) {
  if (so.schedule == Schedule::ondemand) return std::max(1, model.config().n_expert_used);
  const uint64_t slot = StreamingExperts::slot_bytes_for(model, so.io_mode);
  const uint64_t bytes = so.prefetch_inflight > 0 ? so.prefetch_inflight : 2 * slot;
  return std::max<int>(2, static_cast<int>(bytes / std::max<uint64_t>(slot, 1)));
}

}  // namespace les
