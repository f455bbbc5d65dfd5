// The device probe for one model's expert reads (storage/device_probe.h), cached per device:
// what `--read-chunk auto`, the `--stats` ceiling, `les probe` and the benchmarks' ceilings use.
#pragma once

#include <memory>
#include <string>

#include "les/model/model.h"
#include "les/sched/streaming_experts.h"
#include "les/storage/device_probe.h"

namespace les {

struct IoProbeOptions {
  bool refresh = false;  // measure even when the cache has this device's probe
  storage::IoMode io_mode = storage::default_io_mode();  // uring where the kernel allows it, else pread
  storage::IoOptions io{};                  // the fake backend's device model (io_mode fake)
  std::shared_ptr<storage::ReadFile> file;  // null: open the model file as the engine would
  std::string cache_path = storage::probe_cache_path();  // "": neither read nor write a cache
  bool quick = false;    // shorter points (tests): depths 1-16, 0.06 s per point; never cached
  bool progress = true;  // a progress line on stderr while measuring (when it is a terminal)
  bool register_buffers = true;  // as StreamingOptions::register_buffers
  // Also measure the engine's read order while every core computes (storage::ProbePoint::loaded):
  // the decode ceiling's bandwidth.
  bool loaded = true;
};

struct IoProbeResult {
  storage::DeviceProbe probe;
  bool cached = false;  // came from the cache file
};

// The aligned extents of every routed expert of every expert layer, as the engine reads them.
std::vector<storage::ExpertExtents> model_expert_extents(const Model& model, size_t alignment);

// The probe of the device holding the model's experts: from the cache unless refresh, else
// measured (seconds) and saved. Fake-backend probes are never cached. Throws les::Error when the
// file cannot be read; a cache that cannot be written only warns.
IoProbeResult probe_model_io(const Model& model, const IoProbeOptions& o);

// The probe options an engine with these streaming options reads with.
IoProbeOptions io_probe_options_for(const StreamingOptions& so);

// Seconds per token at the decode ceiling: t_compute seconds of compute and `bytes` to read from
// a disk that gives loaded_mbs (MB/s) while the cores compute and idle_mbs while they wait
// (<= 0 or below loaded_mbs: loaded_mbs). At best the reads overlap the whole compute
// (loaded_mbs x t_compute bytes) and the rest follow at idle_mbs: max(t_compute, t_compute +
// (bytes - loaded_mbs x t_compute) / idle_mbs); with one rate that is max(t_compute, bytes / rate).
// No schedule can be faster on such a disk, however it splits reads between compute and waits.
double decode_ceiling_seconds(double bytes, double t_compute, double loaded_mbs, double idle_mbs);

// The decode ceiling over one interval of decoding: `tokens` steps took `seconds`, read `bytes`
// of experts and waited `stall_s` for reads. t_io = bytes per token / the device's decode
// bandwidth (DeviceProbe::ceiling_mbs: the share the disk keeps while the cores compute) and
// idle_mbs its bandwidth with idle cores (DeviceProbe::idle_ceiling_mbs; 0: the same),
// t_compute = the time per token not spent waiting for reads; ceiling = 1 / decode_ceiling_seconds. of_ceiling > ~1.05 means the reads beat the probe: a probe bug.
struct IoCeiling {
  double mb_per_token = 0, disk_mbs = 0, idle_mbs = 0, t_io_s = 0, t_compute_s = 0, ceiling_tps = 0, tps = 0,
         of_ceiling = 0;
};
IoCeiling io_ceiling(uint64_t bytes, double stall_s, double seconds, uint64_t tokens, storage::DiskRates disk);
std::string format_io_ceiling(const IoCeiling& c, int queue_depth);

// Experts whose reads are in the device together under this schedule: on demand, a layer's
// misses (k); with lookahead, the prefetch bytes in flight (StreamingOptions::prefetch_inflight,
// two slots when 0) in slots, at least 2.
int experts_in_flight(const StreamingOptions& so, const Model& model);

}  // namespace les
