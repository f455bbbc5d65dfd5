// The device probe: what a storage device delivers for one model's expert reads, as a grid of
// request size x queue depth, measured in a burst after idle and sustained. It answers two
// questions the streaming engine cannot answer from its own runs:
//   - the ceiling: the most bytes per second the device gives at the engine's queue depth, so
//     that "of ceiling" says how close a schedule is to the limit (above ~105% is a bug);
//   - read shaping: whether an expert's extent reads faster whole or as N aligned chunks in flight
//     at once (`--read-chunk auto`).
// Decode reads overlap the engine's compute, so the probe also measures the engine's read order
// while every core computes ("loaded" points, when ProbeOptions::load is given): on a VM whose
// host serves the disk beside the guest's CPUs the device reads slower then (measured on the
// Zen 5 VM: about 10 GB/s with idle vCPUs, 5.6-6.6 GB/s with both computing; docs/io.md), and
// the decode ceiling takes those points.
// Probes are cached per device, file system and extent size (probing takes seconds), in a JSON
// file (probe_cache_path()); `les probe --refresh` or `--probe-refresh` measure again. Each probe
// records how much of the CPU time other work took while it ran (a busy machine under-measures).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "les/storage/io.h"

namespace les::storage {

struct ProbePoint {
  uint64_t request_bytes = 0;  // bytes per request (one op, or a whole expert's ops)
  bool whole_expert = false;   // the request is one whole expert, as the engine reads it unchunked
  int queue_depth = 0;         // requests in flight
  double burst_mbs = 0;        // MB/s (1e6 bytes) over the first requests after an idle pause
  double sustained_mbs = 0;    // MB/s over the rest of the point
  double latency_us = 0;       // median request latency, sustained
  // The access pattern of the point (whole experts only for warm and sweep). Ceilings count
  // every pattern; read shaping compares cold points only.
  //   cold:  random experts of the whole file;
  //   warm:  re-reads of a small working set read once before (what a cache in front of the
  //          device, a VM host's or a controller's, gives the engine's re-reads of hot experts);
  //   sweep: the engine's decode order: k random experts of one layer, then of the next layer, ...
  //          (a device or host that reads ahead or caches by region serves this faster);
  //   loaded: the sweep order (cold whole experts where the probe has no sweep) while every core
  //          runs the engine's compute at the lowest CPU priority, as decode reads overlap it.
  enum Pattern : uint8_t { cold = 0, warm = 1, sweep = 2, loaded = 3 };
  Pattern pattern = cold;
};
const char* probe_pattern_name(ProbePoint::Pattern p);

// A device's decode bandwidths for one queue depth (MB/s): while every core computes, and with
// idle cores (les::decode_ceiling_seconds takes both).
struct DiskRates {
  double loaded_mbs = 0, idle_mbs = 0;
};

struct DeviceProbe {
  std::string device;       // device_key() of the file probed
  std::string file;         // the file whose extents were read (for messages)
  uint64_t expert_bytes = 0;  // one expert's read bytes (the largest request)
  int expert_extents = 1;     // reads per whole expert (3 in an original GGUF, 1 packed)
  size_t alignment = 0;
  std::string io_mode;      // backend used
  double probed_at = 0;     // Unix time
  double seconds = 0;       // time the probe took
  // The share of the machine's CPU time that other work took while the probe ran (other
  // processes, interrupts, a hypervisor's steal; util/cpu_share.h), 0-1; -1 unknown. A probe
  // taken on a busy machine completes and resubmits its reads late and under-measures the device.
  double other_cpu = -1;
  int load_threads = 0;     // threads that computed beside the loaded points (0: none measured)
  std::vector<ProbePoint> points;

  // Taken while other work had more than kBusyShare of the CPU time.
  static constexpr double kBusyShare = 0.25;
  bool taken_busy() const { return other_cpu > kBusyShare; }

  // Ops in the device at a point: its depth, times expert_extents for whole experts.
  int ops_of(const ProbePoint& p) const { return p.whole_expert ? p.queue_depth * expert_extents : p.queue_depth; }
  // The best bandwidth (MB/s) with idle cores and at most max_ops ops in flight (the engine's
  // queue depth): the largest of the burst and sustained figures of every point but the loaded
  // ones within it. 0 when no point is.
  double idle_ceiling_mbs(int max_ops) const;
  // How much of that the device gives while the cores compute: the median over the probed
  // depths of a loaded point's sustained MB/s over the same depth's point of the same order with
  // idle cores (sweep, else cold whole experts), at most 1; 1 without loaded points. Sustained
  // figures and a median over every depth: single short points, bursts above all, move by 20-50%
  // on a cloud disk, and the share is the cores' cost, not the depth's.
  double loaded_factor() const;
  // The decode ceiling's bandwidth: idle_ceiling_mbs x loaded_factor (every request size and
  // depth the probe measured, as read shaping may read, scaled by the compute's cost).
  double ceiling_mbs(int max_ops) const;
  DiskRates rates(int max_ops) const { return {ceiling_mbs(max_ops), idle_ceiling_mbs(max_ops)}; }
  bool has_loaded() const;
  // The cold point for (size, depth) (whole_expert: the whole-expert point at that depth), or null.
  const ProbePoint* find(uint64_t request_bytes, int queue_depth) const;
  const ProbePoint* find_whole(int queue_depth) const;
};

// Read shaping from a probe: the chunk size (0 = whole extents) that reads experts fastest when
// `experts_in_flight` experts are read at once with at most `queue_depth` ops in the device.
// Whole reads run at the deepest probed depth within min(experts_in_flight, queue_depth /
// expert_extents) experts; chunk c splits an expert into ceil(expert_bytes / c) ops, so the ops
// in flight are min(queue_depth, experts_in_flight x that). A point's merit is the mean of its
// burst and sustained bandwidth (the deepest probed depth within those ops). A chunk size must
// beat whole reads by `min_gain` (a fraction: the probe's single short measurements move by
// about that much on a cloud volume) to be chosen.
struct ChunkChoice {
  uint64_t chunk = 0;         // 0: whole extents
  double whole_mbs = 0;       // merit of whole reads
  double chosen_mbs = 0;      // merit of the choice
};
// "whole reads" or "reads in chunks of N KiB", for messages and reports.
std::string read_shaping_name(uint64_t chunk);

ChunkChoice choose_read_chunk(const DeviceProbe& p, int experts_in_flight, int queue_depth, double min_gain = 0.15);

struct ProbeOptions {
  // Request sizes besides the whole expert (multiples of the file's alignment; sizes not below
  // the largest extent are dropped). Empty: 64 KiB and an eighth, a quarter and half of the
  // expert (aligned down).
  std::vector<uint64_t> sizes;
  std::vector<int> depths{1, 2, 4, 8, 16, 32};
  double point_seconds = 0.25;  // per point, after its idle pause
  double idle_seconds = 0.15;   // pause before each point (the burst follows it)
  uint64_t warm_set_bytes = uint64_t{256} << 20;  // the warm points' working set (0: none)
  // Sweep points: the experts are layer-major, experts_per_layer of each layer in order; each
  // layer visit reads experts_per_token of them (0: no sweep points).
  int experts_per_layer = 0, experts_per_token = 0;
  IoMode io_mode = default_io_mode();  // uring where the kernel allows it, else pread
  IoOptions io{};               // fake-backend device model and faults (io_mode fake)
  bool register_buffers = true; // register the probe's slots with io_uring, as the engine does
  // Loaded points: load_threads threads (0: none) call load(stop) at the lowest CPU priority
  // (SCHED_IDLE, else nice 19) while those points are measured; load returns soon after stop is
  // set. It stands for the engine's compute during decode (sched/io_probe.cpp: the decode's
  // quantized matrix-vector products).
  int load_threads = 0;
  std::function<void(const std::atomic<bool>& stop)> load;
  std::function<void(size_t done, size_t total)> progress;  // per point
};

// One expert's reads: the aligned extents of its tensors, in file order.
using ExpertExtents = std::vector<AlignedExtent>;
// The bytes of the largest expert's reads.
uint64_t expert_read_bytes(const std::vector<ExpertExtents>& experts);

// Measures `file` with reads of the given experts' extents (random experts; requests smaller
// than an extent read a random aligned window of it). Throws les::Error when a read fails or
// there is nothing to read.
DeviceProbe probe_device(std::shared_ptr<ReadFile> file, const std::vector<ExpertExtents>& experts,
                         const ProbeOptions& opt);

// "dev M:m fs 0xTYPE" for the file system holding path (the cache key's device part).
std::string device_key(const std::string& path);

// The cache file: $LES_PROBE_CACHE, else $XDG_CACHE_HOME/les/device-probes.json, else
// $HOME/.cache/les/device-probes.json ("" when none of these is set).
std::string probe_cache_path();
// The cached probe for (device, alignment, expert_bytes, io_mode), if any. A cache file that
// cannot be read or parsed counts as empty (a warning on stderr), never as an error.
std::optional<DeviceProbe> load_cached_probe(const std::string& cache_path, const std::string& device,
                                             size_t alignment, uint64_t expert_bytes, const std::string& io_mode);
// Adds or replaces p's entry in the cache file (created with its directory; written atomically),
// except that a probe taken on a busy machine never replaces one that was not (returns false and
// leaves the file as it was). Throws les::Error when it cannot be written.
bool save_cached_probe(const std::string& cache_path, const DeviceProbe& p);

// A human-readable table of the probe (sizes down, depths across: sustained / burst MB/s).
std::string format_probe(const DeviceProbe& p);
std::string probe_json(const DeviceProbe& p);

}  // namespace les::storage
