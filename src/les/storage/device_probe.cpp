#include "les/storage/device_probe.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <tuple>
#include <unistd.h>

#include "les/util/atomic_file.h"
#include "les/util/cpu_share.h"
#include "les/util/error.h"
#include "les/util/clock.h"

namespace les::storage {

namespace {

// Version 2: probes whose slots are one populated, huge-page backed, registered arena as the
// engine's (version 1 read into separate small buffers and measured 2.5-4x less than the engine
// gets on this VM's disk). Version 3: loaded points (the decode ceiling's; version 2 probes have
// none and would keep the idle figures the engine cannot reach while it computes).
constexpr int kCacheVersion = 3;

// Threads running the probe's load at the lowest CPU priority for their lifetime: the probe's
// own thread preempts them whenever a completion wakes it, as the engine's decoding thread
// would take its reads' completions between products.
class IdleLoad {
 public:
  IdleLoad(int threads, const std::function<void(const std::atomic<bool>&)>& load) {
    for (int i = 0; i < threads && load; ++i) {
      threads_.emplace_back([this, &load] {
        sched_param sp{};
        if (::sched_setscheduler(0, SCHED_IDLE, &sp) != 0) {  // 0: this thread (Linux)
          (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
        }
        load(stop_);
      });
    }
  }
  ~IdleLoad() {
    stop_.store(true);
    for (std::thread& t : threads_) t.join();
  }
  IdleLoad(const IdleLoad&) = delete;
  IdleLoad& operator=(const IdleLoad&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Random requests of one probe point over the experts' extents.
class RequestMaker {
 public:
  RequestMaker(const std::vector<ExpertExtents>& experts, size_t alignment, uint32_t seed)
      : experts_(experts), alignment_(std::max<size_t>(alignment, 1)), rng_(seed) {}
  // Sweep order: k random experts of group (layer) g, then of g + 1, ... (groups of `per` experts).
  void sweep(int per, int k) {
    per_ = per;
    k_ = k;
  }

  // Ops of one request into dst: a whole expert, or one window of `size` bytes of an extent.
  std::vector<IoOp> make(uint64_t size, bool whole, uint8_t* dst) {
    size_t pick = rng_() % experts_.size();
    if (per_ > 0) {
      const size_t groups = experts_.size() / static_cast<size_t>(per_);
      pick = group_ * static_cast<size_t>(per_) + rng_() % static_cast<size_t>(per_);
      if (++in_group_ >= k_) {
        in_group_ = 0;
        group_ = (group_ + 1) % groups;
      }
    }
    const ExpertExtents& ex = experts_[pick];
    std::vector<IoOp> ops;
    if (whole) {
      uint64_t at = 0;
      for (const AlignedExtent& e : ex) {
        ops.push_back({e.file_offset, e.length, dst + at});
        at += e.length;
      }
      return ops;
    }
    const AlignedExtent& e = ex[rng_() % ex.size()];
    if (e.length <= size) {
      ops.push_back({e.file_offset, e.length, dst});
    } else {
      const uint64_t room = (e.length - size) / alignment_ + 1;
      ops.push_back({e.file_offset + (rng_() % room) * alignment_, size, dst});
    }
    return ops;
  }

 private:
  const std::vector<ExpertExtents>& experts_;
  size_t alignment_;
  std::mt19937_64 rng_;
  int per_ = 0, k_ = 0, in_group_ = 0;
  size_t group_ = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  return v[m];
}

// One point: after an idle pause, `depth` requests kept in flight for opt.point_seconds.
ProbePoint measure_point(IoEngine& eng, RequestMaker& maker, std::vector<uint8_t*>& bufs, uint64_t size,
                         bool whole, int depth, uint64_t expert_bytes, const ProbeOptions& opt, uint64_t& tag) {
  std::this_thread::sleep_for(std::chrono::duration<double>(opt.idle_seconds));
  const uint64_t req_bytes = whole ? expert_bytes : size;
  // The burst: the first requests after the pause, at least one round of the queue and 4 MiB.
  const uint64_t burst_target = std::max<uint64_t>(static_cast<uint64_t>(depth) * req_bytes, uint64_t{4} << 20);
  auto submit = [&](int slot) {
    IoRequest r;
    r.tag = (++tag << 8) | static_cast<uint64_t>(slot);
    r.ops = maker.make(size, whole, bufs[static_cast<size_t>(slot)]);
    eng.submit(std::move(r));
  };
  const double t0 = now_s();
  for (int i = 0; i < depth; ++i) submit(i);
  uint64_t bytes = 0, burst_bytes = 0;
  double t_burst = 0;
  std::vector<double> lat;
  std::vector<IoCompletion> done;
  bool stopping = false;
  while (eng.pending() > 0) {
    done.clear();
    eng.wait(done, std::chrono::microseconds(200000));
    const double t = now_s();
    for (const IoCompletion& c : done) {
      if (!c.ok()) throw Error(strfmt("device probe: %s", c.error.c_str()));
      if (stopping) continue;  // in flight at the end: not counted
      bytes += c.bytes;
      if (t_burst == 0) {
        if (bytes >= burst_target) {
          t_burst = t;
          burst_bytes = bytes;
        }
      } else {
        lat.push_back(static_cast<double>(c.latency_us));
      }
      if (t - t0 >= opt.point_seconds) {
        stopping = true;
      } else {
        submit(static_cast<int>(c.tag & 0xff));
      }
    }
  }
  const double t_end = now_s();
  ProbePoint p;
  p.request_bytes = req_bytes;
  p.whole_expert = whole;
  p.queue_depth = depth;
  if (t_burst == 0) {  // the point ended within its burst
    t_burst = t_end;
    burst_bytes = bytes;
  }
  p.burst_mbs = static_cast<double>(burst_bytes) / 1e6 / std::max(t_burst - t0, 1e-9);
  p.sustained_mbs = bytes > burst_bytes && t_end > t_burst
                        ? static_cast<double>(bytes - burst_bytes) / 1e6 / (t_end - t_burst)
                        : p.burst_mbs;
  p.latency_us = median(std::move(lat));
  return p;
}

double merit(const ProbePoint& p) { return 0.5 * (p.burst_mbs + p.sustained_mbs); }

// The deepest probed depth <= want (the shallowest probed one when none is).
int depth_within(const DeviceProbe& p, int want) {
  int best = 0, lowest = 0;
  for (const ProbePoint& x : p.points) {
    if (x.pattern != ProbePoint::cold) continue;
    if (x.queue_depth <= want) best = std::max(best, x.queue_depth);
    lowest = lowest == 0 ? x.queue_depth : std::min(lowest, x.queue_depth);
  }
  return best > 0 ? best : lowest;
}

nlohmann::json to_json(const DeviceProbe& p) {
  nlohmann::json j;
  j["device"] = p.device;
  j["file"] = p.file;
  j["expert_bytes"] = p.expert_bytes;
  j["expert_extents"] = p.expert_extents;
  j["alignment"] = p.alignment;
  j["io_mode"] = p.io_mode;
  j["probed_at"] = p.probed_at;
  j["seconds"] = p.seconds;
  j["other_cpu"] = p.other_cpu;
  j["load_threads"] = p.load_threads;
  nlohmann::json pts = nlohmann::json::array();
  for (const ProbePoint& x : p.points) {
    pts.push_back({{"request_bytes", x.request_bytes},
                   {"whole_expert", x.whole_expert},
                   {"queue_depth", x.queue_depth},
                   {"burst_mbs", x.burst_mbs},
                   {"sustained_mbs", x.sustained_mbs},
                   {"latency_us", x.latency_us},
                   {"pattern", probe_pattern_name(x.pattern)}});
  }
  j["points"] = std::move(pts);
  return j;
}

DeviceProbe from_json(const nlohmann::json& j) {
  DeviceProbe p;
  p.device = j.at("device").get<std::string>();
  p.file = j.at("file").get<std::string>();
  p.expert_bytes = j.at("expert_bytes").get<uint64_t>();
  p.expert_extents = j.at("expert_extents").get<int>();
  if (p.expert_extents < 1) throw Error("expert_extents out of range");
  p.alignment = j.at("alignment").get<size_t>();
  p.io_mode = j.at("io_mode").get<std::string>();
  p.probed_at = j.at("probed_at").get<double>();
  p.seconds = j.at("seconds").get<double>();
  p.other_cpu = j.contains("other_cpu") ? j.at("other_cpu").get<double>() : -1;  // absent in older caches
  if (!(p.other_cpu >= -1 && p.other_cpu <= 1)) throw Error("other_cpu out of range");
  p.load_threads = j.value("load_threads", 0);
  if (p.load_threads < 0 || p.load_threads > 4096) throw Error("load_threads out of range");
  for (const auto& x : j.at("points")) {
    ProbePoint q;
    q.request_bytes = x.at("request_bytes").get<uint64_t>();
    q.whole_expert = x.at("whole_expert").get<bool>();
    q.queue_depth = x.at("queue_depth").get<int>();
    q.burst_mbs = x.at("burst_mbs").get<double>();
    q.sustained_mbs = x.at("sustained_mbs").get<double>();
    q.latency_us = x.at("latency_us").get<double>();
    const std::string pat = x.at("pattern").get<std::string>();
    if (pat == "cold") q.pattern = ProbePoint::cold;
    else if (pat == "warm") q.pattern = ProbePoint::warm;
    else if (pat == "sweep") q.pattern = ProbePoint::sweep;
    else if (pat == "loaded") q.pattern = ProbePoint::loaded;
    else throw Error("unknown probe pattern '" + pat + "'");
    if (q.queue_depth < 1 || q.request_bytes == 0 || !(q.burst_mbs >= 0) || !(q.sustained_mbs >= 0)) {
      throw Error("a probe point is out of range");
    }
    p.points.push_back(q);
  }
  return p;
}

// The cache's entries; an unreadable or malformed file is empty (with a warning).
nlohmann::json read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::array();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object() && j.value("version", 0) == kCacheVersion && j.contains("probes") && j["probes"].is_array()) {
      return j["probes"];
    }
    std::fprintf(stderr, "les: ignoring the device probe cache %s (not a version %d probe cache)\n", path.c_str(), kCacheVersion);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "les: ignoring the device probe cache %s (%s)\n", path.c_str(), e.what());
  }
  return nlohmann::json::array();
}

bool same_entry(const DeviceProbe& p, const std::string& device, size_t alignment, uint64_t expert_bytes,
                const std::string& io_mode) {
  return p.device == device && p.alignment == alignment && p.expert_bytes == expert_bytes && p.io_mode == io_mode;
}

}  // namespace

uint64_t expert_read_bytes(const std::vector<ExpertExtents>& experts) {
  uint64_t most = 0;
  for (const ExpertExtents& ex : experts) {
    uint64_t b = 0;
    for (const AlignedExtent& e : ex) b += e.length;
    most = std::max(most, b);
  }
  return most;
}

std::string read_shaping_name(uint64_t chunk) {
  return chunk ? strfmt("reads in chunks of %llu KiB", static_cast<unsigned long long>(chunk >> 10)) : "whole reads";
}

const char* probe_pattern_name(ProbePoint::Pattern p) {
  return p == ProbePoint::warm     ? "warm"
         : p == ProbePoint::sweep  ? "sweep"
         : p == ProbePoint::loaded ? "loaded"
                                   : "cold";
}

namespace {
// The best burst or sustained figure of the points within max_ops that `take` accepts.
template <class Take>
double best_within(const DeviceProbe& p, int max_ops, Take take) {
  double best = 0;
  for (const ProbePoint& x : p.points) {
    if (take(x) && p.ops_of(x) <= max_ops) best = std::max({best, x.burst_mbs, x.sustained_mbs});
  }
  return best;
}
}  // namespace

bool DeviceProbe::has_loaded() const {
  return std::any_of(points.begin(), points.end(), [](const ProbePoint& x) { return x.pattern == ProbePoint::loaded; });
}

double DeviceProbe::loaded_factor() const {
  if (!has_loaded()) return 1.0;
  const bool sweep = std::any_of(points.begin(), points.end(), [](const ProbePoint& x) { return x.pattern == ProbePoint::sweep; });
  std::vector<double> ratios;
  for (const ProbePoint& l : points) {
    if (l.pattern != ProbePoint::loaded) continue;
    for (const ProbePoint& x : points) {
      const bool ref = sweep ? x.pattern == ProbePoint::sweep : x.pattern == ProbePoint::cold && x.whole_expert;
      if (ref && x.queue_depth == l.queue_depth && x.sustained_mbs > 0) ratios.push_back(l.sustained_mbs / x.sustained_mbs);
    }
  }
  if (ratios.empty()) return 1.0;
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  const double mid = n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
  return std::clamp(mid, 0.0, 1.0);
}

double DeviceProbe::ceiling_mbs(int max_ops) const { return idle_ceiling_mbs(max_ops) * loaded_factor(); }

double DeviceProbe::idle_ceiling_mbs(int max_ops) const {
  return best_within(*this, max_ops, [](const ProbePoint& x) { return x.pattern != ProbePoint::loaded; });
}

const ProbePoint* DeviceProbe::find(uint64_t request_bytes, int queue_depth) const {
  for (const ProbePoint& x : points) {
    if (x.pattern == ProbePoint::cold && !x.whole_expert && x.request_bytes == request_bytes && x.queue_depth == queue_depth) return &x;
  }
  return nullptr;
}

const ProbePoint* DeviceProbe::find_whole(int queue_depth) const {
  for (const ProbePoint& x : points) {
    if (x.pattern == ProbePoint::cold && x.whole_expert && x.queue_depth == queue_depth) return &x;
  }
  return nullptr;
}

ChunkChoice choose_read_chunk(const DeviceProbe& p, int experts_in_flight, int queue_depth, double min_gain) {
  ChunkChoice c;
  const int in_flight = std::max(1, experts_in_flight);
  const int whole_depth = std::min(in_flight, std::max(1, queue_depth / std::max(1, p.expert_extents)));
  if (const ProbePoint* w = p.find_whole(depth_within(p, whole_depth))) c.whole_mbs = merit(*w);
  c.chosen_mbs = c.whole_mbs;
  for (const ProbePoint& x : p.points) {
    if (x.pattern != ProbePoint::cold || x.whole_expert || x.request_bytes >= p.expert_bytes) continue;
    const uint64_t per_expert = (p.expert_bytes + x.request_bytes - 1) / x.request_bytes;
    const int ops = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(queue_depth), per_expert * in_flight));
    if (x.queue_depth != depth_within(p, ops)) continue;
    const double m = merit(x);
    if (m > c.chosen_mbs && m > c.whole_mbs * (1 + min_gain)) {
      c.chosen_mbs = m;
      c.chunk = x.request_bytes;
    }
  }
  return c;
}

DeviceProbe probe_device(std::shared_ptr<ReadFile> file, const std::vector<ExpertExtents>& experts,
                         const ProbeOptions& opt) {
  if (experts.empty()) throw Error("device probe: the model has no expert extents to read");
  const uint64_t expert_bytes = expert_read_bytes(experts);
  uint64_t largest_extent = 0;
  size_t extents = 1;
  for (const ExpertExtents& ex : experts) {
    if (ex.empty()) throw Error("device probe: an expert without extents");
    extents = std::max(extents, ex.size());
    for (const AlignedExtent& e : ex) largest_extent = std::max(largest_extent, e.length);
  }
  if (opt.depths.empty()) throw Error("device probe: no queue depths to measure");
  int max_depth = 0;
  for (int d : opt.depths) {
    if (d < 1 || d > 255) throw Error(strfmt("device probe: queue depth %d out of 1..255", d));
    max_depth = std::max(max_depth, d);
  }
  const uint64_t align = std::max<size_t>(file->alignment(), 1);
  std::vector<uint64_t> wanted = opt.sizes;
  if (wanted.empty()) {
    wanted.push_back(uint64_t{64} << 10);
    for (uint64_t div : {8, 4, 2}) wanted.push_back(std::max(align, expert_bytes / div / align * align));
  }
  std::vector<uint64_t> sizes;
  for (uint64_t s : wanted) {
    if (s == 0 || s % align != 0) {
      throw Error(strfmt("device probe: request size %llu is not a multiple of the file's alignment (%zu)",
                         static_cast<unsigned long long>(s), file->alignment()));
    }
    if (s < largest_extent && std::find(sizes.begin(), sizes.end(), s) == sizes.end()) sizes.push_back(s);
  }
  std::sort(sizes.begin(), sizes.end());
  IoOptions io = opt.io;
  io.queue_depth = max_depth;
  io.prefetch_bytes = 0;
  auto eng = make_io_engine(opt.io_mode, file, io);
  // The reads land as the engine's do: in one arena of expert slots (large arenas are huge-page
  // backed, which lets the kernel send larger requests to the device), populated, and registered
  // with io_uring where the engine registers its slots.
  const uint64_t slot = align_up(expert_bytes, align);
  AlignedBuffer arena(static_cast<size_t>(slot * static_cast<uint64_t>(max_depth)), std::max<size_t>(align, kDirectIoAlign));
  arena.populate(0, arena.size());
  std::vector<uint8_t*> bufs;
  for (int i = 0; i < max_depth; ++i) bufs.push_back(arena.data() + static_cast<size_t>(slot) * static_cast<size_t>(i));
  if (opt.register_buffers) eng->register_buffers({{arena.data(), arena.size()}}, nullptr);
  RequestMaker maker(experts, file->alignment(), 7);
  DeviceProbe p;
  p.file = file->path();
  p.device = device_key(file->path());
  p.expert_bytes = expert_bytes;
  p.expert_extents = static_cast<int>(extents);
  p.alignment = file->alignment();
  p.io_mode = io_mode_name(opt.io_mode);
  p.probed_at = static_cast<double>(std::chrono::duration_cast<std::chrono::seconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
  const double t0 = now_s();
  const OtherCpuShare other_cpu;
  // The warm set: random experts up to warm_set_bytes (at least one), each read once first.
  std::vector<ExpertExtents> warm_set;
  if (opt.warm_set_bytes > 0) {
    std::vector<size_t> order(experts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(11));
    uint64_t bytes = 0;
    for (size_t i : order) {
      if (!warm_set.empty() && bytes >= opt.warm_set_bytes) break;
      warm_set.push_back(experts[i]);
      for (const AlignedExtent& e : experts[i]) bytes += e.length;
    }
  }
  const bool sweep = opt.experts_per_layer > 0 && opt.experts_per_token > 0 &&
                     experts.size() % static_cast<size_t>(opt.experts_per_layer) == 0;
  const bool loaded = opt.load_threads > 0 && opt.load;
  const size_t total =
      (sizes.size() + 1 + (warm_set.empty() ? 0 : 1) + (sweep ? 1 : 0) + (loaded ? 1 : 0)) * opt.depths.size();
  uint64_t tag = 0;
  size_t done = 0;
  for (size_t si = 0; si <= sizes.size(); ++si) {
    const bool whole = si == sizes.size();
    for (int d : opt.depths) {
      p.points.push_back(measure_point(*eng, maker, bufs, whole ? 0 : sizes[si], whole, d, expert_bytes, opt, tag));
      if (opt.progress) opt.progress(++done, total);
    }
  }
  if (!warm_set.empty()) {
    // Read the set once (untimed), then whole experts of it at every depth.
    RequestMaker warm_maker(warm_set, file->alignment(), 13);
    for (size_t i = 0; i < warm_set.size(); ++i) {
      IoRequest r;
      r.tag = ++tag << 8;
      uint64_t at = 0;
      for (const AlignedExtent& e : warm_set[i]) {
        r.ops.push_back({e.file_offset, e.length, bufs[0] + at});
        at += e.length;
      }
      eng->submit(std::move(r));
      std::vector<IoCompletion> done_now;
      while (eng->pending() > 0) {
        done_now.clear();
        eng->wait(done_now, std::chrono::microseconds(200000));
        for (const IoCompletion& c : done_now) {
          if (!c.ok()) throw Error(strfmt("device probe: %s", c.error.c_str()));
        }
      }
    }
    for (int d : opt.depths) {
      ProbePoint x = measure_point(*eng, warm_maker, bufs, 0, true, d, expert_bytes, opt, tag);
      x.pattern = ProbePoint::warm;
      p.points.push_back(x);
      if (opt.progress) opt.progress(++done, total);
    }
  }
  if (sweep) {
    RequestMaker sweep_maker(experts, file->alignment(), 17);
    sweep_maker.sweep(opt.experts_per_layer, opt.experts_per_token);
    for (int d : opt.depths) {
      ProbePoint x = measure_point(*eng, sweep_maker, bufs, 0, true, d, expert_bytes, opt, tag);
      x.pattern = ProbePoint::sweep;
      p.points.push_back(x);
      if (opt.progress) opt.progress(++done, total);
    }
  }
  if (loaded) {
    RequestMaker load_maker(experts, file->alignment(), 19);
    if (sweep) load_maker.sweep(opt.experts_per_layer, opt.experts_per_token);
    const IdleLoad load(opt.load_threads, opt.load);
    for (int d : opt.depths) {
      ProbePoint x = measure_point(*eng, load_maker, bufs, 0, true, d, expert_bytes, opt, tag);
      x.pattern = ProbePoint::loaded;
      p.points.push_back(x);
      if (opt.progress) opt.progress(++done, total);
    }
    p.load_threads = opt.load_threads;
  }
  p.seconds = now_s() - t0;
  p.other_cpu = other_cpu.share();
  return p;
}

std::string device_key(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "unknown";
  struct statfs fs {};
  const unsigned long long fs_type = ::statfs(path.c_str(), &fs) == 0 ? static_cast<unsigned long long>(fs.f_type) : 0;
  return strfmt("dev %u:%u fs 0x%llx", major(st.st_dev), minor(st.st_dev), fs_type);
}

std::string probe_cache_path() {
  if (const char* p = std::getenv("LES_PROBE_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/les/device-probes.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/les/device-probes.json";
  return "";
}

std::optional<DeviceProbe> load_cached_probe(const std::string& cache_path, const std::string& device,
                                             size_t alignment, uint64_t expert_bytes, const std::string& io_mode) {
  if (cache_path.empty()) return std::nullopt;
  for (const auto& j : read_cache(cache_path)) {
    try {
      DeviceProbe p = from_json(j);
      if (same_entry(p, device, alignment, expert_bytes, io_mode) && !p.points.empty()) return p;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "les: ignoring an entry of the device probe cache %s (%s)\n", cache_path.c_str(), e.what());
    }
  }
  return std::nullopt;
}

bool save_cached_probe(const std::string& cache_path, const DeviceProbe& p) {
  if (cache_path.empty()) throw Error("no place for the device probe cache: set LES_PROBE_CACHE or HOME");
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& j : read_cache(cache_path)) {
    try {
      const DeviceProbe old = from_json(j);
      if (same_entry(old, p.device, p.alignment, p.expert_bytes, p.io_mode)) {
        if (p.taken_busy() && !old.taken_busy() && !old.points.empty()) return false;
        continue;
      }
    } catch (const std::exception&) {
      continue;  // a malformed entry is dropped
    }
    entries.push_back(j);
  }
  entries.push_back(to_json(p));
  const nlohmann::json doc = {{"version", kCacheVersion}, {"probes", entries}};
  const std::string text = doc.dump(1) + "\n";
  const std::filesystem::path dir = std::filesystem::path(cache_path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(strfmt("cannot create %s for the device probe cache: %s", dir.c_str(), ec.message().c_str()));
  write_file_atomic(cache_path, text.data(), text.size());
  return true;
}

std::string format_probe(const DeviceProbe& p) {
  std::vector<int> depths;
  std::vector<std::tuple<uint64_t, bool, int>> rows;  // (bytes, whole, pattern)
  for (const ProbePoint& x : p.points) {
    if (std::find(depths.begin(), depths.end(), x.queue_depth) == depths.end()) depths.push_back(x.queue_depth);
    const std::tuple<uint64_t, bool, int> r{x.request_bytes, x.whole_expert, static_cast<int>(x.pattern)};
    if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  }
  std::string s = strfmt("device probe of %s (%s, %s, expert %.2f MiB, %.1f s%s): MB/s sustained / burst after idle, "
                         "median latency (warm: re-reads of a working set read once before; sweep: k experts of a layer, "
                         "layer after layer%s)\n",
                         p.file.c_str(), p.device.c_str(), p.io_mode.c_str(), p.expert_bytes / 1048576.0, p.seconds,
                         p.other_cpu < 0 ? "" : strfmt(", other work took %.0f%% of the CPU time", 100 * p.other_cpu).c_str(),
                         p.load_threads > 0 ? strfmt("; loaded: the sweep while %d threads compute, the decode ceiling's",
                                                     p.load_threads).c_str()
                                            : "");
  if (p.taken_busy()) {
    s += "  taken on a busy machine: its bandwidths may be low (les probe --refresh on a quieter machine)\n";
  }
  s += strfmt("%-16s", "request");
  for (int d : depths) s += strfmt(" | %-22s", strfmt("qd %d", d).c_str());
  s += "\n";
  for (const auto& [bytes, whole, pat] : rows) {
    const auto pattern = static_cast<ProbePoint::Pattern>(pat);
    s += strfmt("%-16s", pattern != ProbePoint::cold ? strfmt("%s %.2fM", probe_pattern_name(pattern), bytes / 1048576.0).c_str()
                         : whole                     ? strfmt("expert %.2fM", bytes / 1048576.0).c_str()
                                                     : strfmt("%llu KiB", static_cast<unsigned long long>(bytes >> 10)).c_str());
    for (int d : depths) {
      const ProbePoint* x = nullptr;
      for (const ProbePoint& y : p.points) {
        if (y.request_bytes == bytes && y.whole_expert == whole && y.pattern == pattern && y.queue_depth == d) x = &y;
      }
      s += x ? strfmt(" | %5.0f / %5.0f %6.0fus", x->sustained_mbs, x->burst_mbs, x->latency_us) : strfmt(" | %-22s", "-");
    }
    s += "\n";
  }
  return s;
}

std::string probe_json(const DeviceProbe& p) { return to_json(p).dump(1) + "\n"; }

}  // namespace les::storage
