// The device probe: it measures what a (fake) device model delivers, read shaping follows it,
// its cache survives bad files and keeps other devices' entries, and the decode ceiling built on
// it bounds what the engine achieves (above ~105% would mean the probe is wrong).
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "les/engine/engine.h"
#include "les/sched/io_probe.h"
#include "les/storage/device_probe.h"
#include "les/util/cpu_share.h"
#include "les/util/error.h"
#include "test_util.h"

namespace les {
namespace {

using les::test::tiny_moe_path;
using storage::ChunkChoice;
using storage::DeviceProbe;
using storage::ProbePoint;

std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "les-probe-XXXXXX").string();
  if (!::mkdtemp(t.data())) throw Error("mkdtemp failed");
  return t;
}

// 32 experts of three 128 KiB extents over a 16 MiB in-memory file with 4 KiB alignment.
std::vector<storage::ExpertExtents> synthetic_experts() {
  std::vector<storage::ExpertExtents> ex;
  for (uint64_t e = 0; e < 32; ++e) {
    storage::ExpertExtents x;
    for (uint64_t j = 0; j < 3; ++j) x.push_back({((e * 3 + j) % 120) * (128 << 10), 128 << 10, 0});
    ex.push_back(x);
  }
  return ex;
}

// The probe of a fake device whose model is known. The model's upper bounds and the probe's
// structure hold for every probe (sleeps only overshoot). The lower bounds and the comparisons
// between queue depths need the sleeps to wake on time, which a starved machine (sanitizers,
// parallel tests, a busy hypervisor: seen in CI, 143 MB/s at queue depth 16 under TSan) does
// not give: a probe that misses one of them is taken again, up to 4 probes in all, and the test
// fails if none meets them all.
TEST(DeviceProbe, MeasuresTheFakeDeviceModel) {
  auto file = storage::make_memory_file(std::vector<uint8_t>(16 << 20, 7), "fake device", 4096);
  storage::ProbeOptions po;
  po.io_mode = storage::IoMode::fake;
  po.io.fake.latency = std::chrono::microseconds(300);
  po.io.fake.op_mbs = 100;      // one op: 300 us + 1.31 ms per 128 KiB
  po.io.fake.device_mbs = 600;  // all ops together
  po.depths = {1, 4, 16};
  po.experts_per_layer = 8;  // 4 "layers" of 8 experts, 2 read per layer visit: sweep points too
  po.experts_per_token = 2;
  po.point_seconds = 0.15;
  po.idle_seconds = 0.01;
  std::string misses;
  constexpr int kProbes = 4;
  for (int attempt = 1; attempt <= kProbes; ++attempt) {
    size_t calls = 0, total = 0;
    po.progress = [&](size_t done, size_t t) {
      ++calls;
      total = t;
      EXPECT_EQ(done, calls);
    };
    const DeviceProbe p = storage::probe_device(file, synthetic_experts(), po);
    EXPECT_EQ(p.expert_bytes, 3u * (128 << 10));
    EXPECT_EQ(p.expert_extents, 3);
    EXPECT_EQ(calls, total);
    // 64 KiB, E/8 = 48 KiB and E/4 = 96 KiB (E/2 is not below the largest extent), plus whole,
    // plus whole re-reads of the warm set (here every expert: 12 MiB < 256 MiB).
    EXPECT_EQ(p.points.size(), 6u * 3u);
    int warm = 0;
    for (const ProbePoint& x : p.points) {
      if (x.pattern != ProbePoint::warm) continue;
      ++warm;
      EXPECT_TRUE(x.whole_expert);
      EXPECT_LT(x.sustained_mbs, 640);  // no cache in front of this device: no faster than cold
    }
    EXPECT_EQ(warm, 3);
    for (const ProbePoint& x : p.points) {
      if (x.pattern == ProbePoint::sweep) {
        EXPECT_LT(x.sustained_mbs, 640);
      }
    }
    ASSERT_NE(p.find_whole(1), nullptr);
    EXPECT_EQ(p.find_whole(1)->pattern, ProbePoint::cold);
    ASSERT_NE(p.find(64 << 10, 1), nullptr);
    EXPECT_EQ(p.find(192 << 10, 1), nullptr);
    ASSERT_NE(p.find_whole(16), nullptr);
    // The model's upper bounds. One 64 KiB op at a time: 64 KiB per 955 us = 69 MB/s.
    EXPECT_LT(p.find(64 << 10, 1)->sustained_mbs, 75);
    // One op in flight: at most the 96 KiB op's 96 KiB per 1.28 ms = 77 MB/s.
    EXPECT_LT(p.ceiling_mbs(1), 80);
    // Whole experts one at a time are three ops in parallel: 384 KiB per 1.61 ms = 244 MB/s.
    EXPECT_EQ(p.ops_of(*p.find_whole(4)), 12);
    EXPECT_LT(p.ceiling_mbs(3), 265);
    // Deep queues reach the device's 600 MB/s, never more.
    EXPECT_LT(p.ceiling_mbs(16), 640);
    const std::string table = storage::format_probe(p);
    EXPECT_NE(table.find("qd 16"), std::string::npos) << table;
    EXPECT_NE(table.find("expert 0.38M"), std::string::npos) << table;
    EXPECT_NE(table.find("sweep 0.38M"), std::string::npos) << table;
    EXPECT_NE(table.find("warm 0.38M"), std::string::npos) << table;

    // Under TSan the fake device's sleeps end late by more than the lower bounds allow (the CI
    // check of 2026-12-03 missed them in four probes of four, other work at 47-60% of the CPU);
    // the probe's threads still ran under it, and the Release and ASan builds check the bounds.
    if (les::test::kThreadSanitized) {
      std::printf("TSan build: the fake device's lower bounds are not checked\n");
      return;
    }
    // The lower bounds (loose: a loaded machine wakes sleeps late) and what follows from them:
    // two experts at a time with 16 ops, chunks (8 ops per expert) beat whole reads (3 ops).
    const ChunkChoice c = storage::choose_read_chunk(p, 2, 16);
    std::string miss;
    auto need = [&](bool ok, const char* what) {
      if (!ok) miss += std::string(miss.empty() ? "" : ", ") + what;
    };
    need(p.find(64 << 10, 1)->sustained_mbs > 20, "64 KiB at qd 1 > 20 MB/s");
    need(p.ceiling_mbs(3) > 90, "ceiling at 3 ops > 90 MB/s");
    need(p.ceiling_mbs(16) > 250, "ceiling at 16 ops > 250 MB/s");
    need(p.ceiling_mbs(16) > 1.5 * p.ceiling_mbs(3), "16 ops > 1.5x 3 ops");
    need(p.find_whole(16)->latency_us > p.find_whole(1)->latency_us, "latency grows with the queue");
    need(c.chunk > 0 && c.chunk < p.expert_bytes, "chunks chosen for 2 experts at 16 ops");
    need(c.chosen_mbs > 1.3 * c.whole_mbs, "chunks 1.3x whole reads");
    if (miss.empty()) return;
    misses += "probe " + std::to_string(attempt) + " missed: " + miss + "\n" + table;
    std::printf("probe %d missed: %s (probing again)\n", attempt, miss.c_str());
  }
  ADD_FAILURE() << "no probe of " << kProbes << " met the fake device's lower bounds:\n" << misses;
}

TEST(DeviceProbe, BadInputIsAClearError) {
  auto file = storage::make_memory_file(std::vector<uint8_t>(1 << 20, 1), "small", 4096);
  storage::ProbeOptions po;
  po.io_mode = storage::IoMode::fake;
  EXPECT_THROW(storage::probe_device(file, {}, po), Error);
  po.sizes = {5000};
  std::vector<storage::ExpertExtents> ex{{{0, 64 << 10, 0}}};
  EXPECT_THROW(storage::probe_device(file, ex, po), Error);
  po.sizes = {};
  po.depths = {0};
  EXPECT_THROW(storage::probe_device(file, ex, po), Error);
  // A read past the end of the file fails the probe with the backend's message.
  po.depths = {1};
  po.point_seconds = 0.01;
  std::vector<storage::ExpertExtents> past{{{2 << 20, 64 << 10, 0}}};
  EXPECT_THROW(storage::probe_device(file, past, po), Error);
}

ProbePoint pt(uint64_t bytes, bool whole, int qd, double mbs) {
  ProbePoint p;
  p.request_bytes = bytes;
  p.whole_expert = whole;
  p.queue_depth = qd;
  p.burst_mbs = p.sustained_mbs = mbs;
  return p;
}

TEST(DeviceProbe, ReadShapingFollowsTheProbe) {
  DeviceProbe p;
  p.expert_bytes = 1 << 20;
  p.points = {pt(1 << 20, true, 1, 1000), pt(1 << 20, true, 4, 2000), pt(1 << 20, true, 8, 2100),
              pt(256 << 10, false, 1, 400), pt(256 << 10, false, 4, 1500), pt(256 << 10, false, 8, 3000)};
  // 4 experts in flight, 8 ops: whole at depth 4 (2000) vs 256 KiB chunks at depth 8 (3000).
  ChunkChoice c = storage::choose_read_chunk(p, 4, 8);
  EXPECT_EQ(c.chunk, 256u << 10);
  EXPECT_DOUBLE_EQ(c.whole_mbs, 2000);
  EXPECT_DOUBLE_EQ(c.chosen_mbs, 3000);
  // A gain below min_gain keeps whole reads.
  EXPECT_EQ(storage::choose_read_chunk(p, 4, 8, 0.6).chunk, 0u);
  // Only 4 ops allowed: chunks run at depth 4 (1500), whole experts too (2000).
  c = storage::choose_read_chunk(p, 4, 4);
  EXPECT_EQ(c.chunk, 0u);
  EXPECT_DOUBLE_EQ(c.chosen_mbs, 2000);
  // One expert in flight, 8 ops: 4 chunks of it run at depth 4 (1500) against whole at depth 1.
  c = storage::choose_read_chunk(p, 1, 8);
  EXPECT_EQ(c.chunk, 256u << 10);
  EXPECT_DOUBLE_EQ(c.whole_mbs, 1000);
  // The ceiling: the best of every point within the depth.
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(1), 1000);
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(8), 3000);
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(0), 0);
  // An original GGUF: a whole expert is three reads, so whole experts at depth 4 need 12 ops.
  p.expert_extents = 3;
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(4), 1500);  // whole at depth 1 (3 ops) or 256 KiB at depth 4
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(12), 3000);
  c = storage::choose_read_chunk(p, 4, 8);   // whole experts: 8 / 3 -> 2 at a time -> depth 1 probed
  EXPECT_DOUBLE_EQ(c.whole_mbs, 1000);
  EXPECT_EQ(c.chunk, 256u << 10);
}

// The decode ceiling scales the idle ceiling by the median share the loaded points keep of the
// same order with idle cores (sweep, else cold whole experts), sustained figures, never above 1.
TEST(DeviceProbe, LoadedFactorScalesTheCeiling) {
  DeviceProbe p;
  p.expert_bytes = 1 << 20;
  auto with = [](ProbePoint x, ProbePoint::Pattern pat, double burst = -1) {
    x.pattern = pat;
    if (burst >= 0) x.burst_mbs = burst;
    return x;
  };
  p.points = {pt(1 << 20, true, 1, 900), pt(256 << 10, false, 8, 2500), with(pt(1 << 20, true, 1, 1000), ProbePoint::sweep),
              with(pt(1 << 20, true, 4, 2000), ProbePoint::sweep), with(pt(1 << 20, true, 8, 2000), ProbePoint::sweep)};
  EXPECT_FALSE(p.has_loaded());
  EXPECT_DOUBLE_EQ(p.loaded_factor(), 1.0);
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(8), 2500);  // no loaded points: the idle ceiling
  // Shares 0.5, 0.6 and 0.9 at depths 1, 4, 8; a loaded burst far above everything (noise) counts
  // for nothing.
  p.points.push_back(with(pt(1 << 20, true, 1, 500), ProbePoint::loaded, 9000));
  p.points.push_back(with(pt(1 << 20, true, 4, 1200), ProbePoint::loaded));
  p.points.push_back(with(pt(1 << 20, true, 8, 1800), ProbePoint::loaded));
  EXPECT_TRUE(p.has_loaded());
  EXPECT_DOUBLE_EQ(p.idle_ceiling_mbs(8), 2500);  // loaded points are not idle ones
  EXPECT_DOUBLE_EQ(p.loaded_factor(), 0.6);       // the median share
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(8), 1500);       // the 256 KiB reads' 2500 x 0.6
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(2), 600);        // whole experts at depth 1: 1000 x 0.6
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(0), 0);
  // Without sweep points the reference is cold whole experts (900 at depth 1 only).
  DeviceProbe q = p;
  q.points.erase(std::remove_if(q.points.begin(), q.points.end(),
                                [](const ProbePoint& x) { return x.pattern == ProbePoint::sweep; }),
                 q.points.end());
  EXPECT_DOUBLE_EQ(q.loaded_factor(), 500.0 / 900);
  // Loaded points faster than idle ones (noise) do not raise the ceiling.
  for (ProbePoint& x : p.points) {
    if (x.pattern == ProbePoint::loaded) x.sustained_mbs = 5000;
  }
  EXPECT_DOUBLE_EQ(p.loaded_factor(), 1.0);
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(8), 2500);
}

// Loaded points: the probe runs its load on the given threads at the lowest CPU priority while
// it measures the engine's read order at every depth; the points and the load's thread count
// survive the cache.
TEST(DeviceProbe, LoadedPointsRunTheLoadAtIdlePriority) {
  auto file = storage::make_memory_file(std::vector<uint8_t>(16 << 20, 7), "fake device", 4096);
  storage::ProbeOptions po;
  po.io_mode = storage::IoMode::fake;
  po.io.fake.latency = std::chrono::microseconds(200);
  po.io.fake.op_mbs = 400;
  po.depths = {1, 4};
  po.experts_per_layer = 8;
  po.experts_per_token = 2;
  po.point_seconds = 0.04;
  po.idle_seconds = 0.005;
  po.warm_set_bytes = 0;
  std::atomic<uint64_t> iterations{0};
  std::atomic<int> idle_priority{0}, threads_seen{0};
  po.load_threads = 2;
  po.load = [&](const std::atomic<bool>& stop) {
    ++threads_seen;
    if (::sched_getscheduler(0) == SCHED_IDLE || ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())) == 19) {
      ++idle_priority;
    }
    while (!stop.load()) iterations.fetch_add(1, std::memory_order_relaxed);
  };
  const DeviceProbe p = storage::probe_device(file, synthetic_experts(), po);
  EXPECT_EQ(threads_seen.load(), 2);
  EXPECT_EQ(idle_priority.load(), 2);
  EXPECT_GT(iterations.load(), 0u);
  EXPECT_EQ(p.load_threads, 2);
  int loaded = 0;
  for (const ProbePoint& x : p.points) {
    if (x.pattern != ProbePoint::loaded) continue;
    ++loaded;
    EXPECT_TRUE(x.whole_expert);
    EXPECT_GT(x.sustained_mbs, 0);
  }
  EXPECT_EQ(loaded, 2);
  EXPECT_TRUE(p.has_loaded());
  EXPECT_GT(p.loaded_factor(), 0);
  EXPECT_LE(p.loaded_factor(), 1);
  EXPECT_DOUBLE_EQ(p.ceiling_mbs(16), p.idle_ceiling_mbs(16) * p.loaded_factor());
  const std::string table = storage::format_probe(p);
  EXPECT_NE(table.find("loaded 0.38M"), std::string::npos) << table;
  EXPECT_NE(table.find("while 2 threads compute"), std::string::npos) << table;

  const std::string dir = temp_dir();
  DeviceProbe named = p;
  named.device = "dev 8:1 fs 0xef53";
  storage::save_cached_probe(dir + "/probes.json", named);
  const auto got = storage::load_cached_probe(dir + "/probes.json", named.device, p.alignment, p.expert_bytes, p.io_mode);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->load_threads, 2);
  EXPECT_DOUBLE_EQ(got->ceiling_mbs(16), p.ceiling_mbs(16));
  std::filesystem::remove_all(dir);

  // No load: no loaded points, the ceiling is the idle one.
  po.load_threads = 0;
  const DeviceProbe idle = storage::probe_device(file, synthetic_experts(), po);
  EXPECT_FALSE(idle.has_loaded());
  EXPECT_EQ(idle.load_threads, 0);
  EXPECT_DOUBLE_EQ(idle.ceiling_mbs(16), idle.idle_ceiling_mbs(16));
}

TEST(DeviceProbe, CacheKeepsEntriesAndSurvivesBadFiles) {
  const std::string dir = temp_dir();
  const std::string cache = dir + "/sub/probes.json";
  DeviceProbe a;
  a.device = "dev 8:1 fs 0xef53";
  a.file = "/models/a.gguf";
  a.expert_bytes = 1 << 20;
  a.alignment = 4096;
  a.io_mode = "uring";
  a.points = {pt(1 << 20, true, 1, 1000), pt(64 << 10, false, 4, 800)};
  DeviceProbe b = a;
  b.device = "dev 259:0 fs 0x9123683e";
  b.points = {pt(1 << 20, true, 1, 3000)};
  EXPECT_FALSE(storage::load_cached_probe(cache, a.device, 4096, 1 << 20, "uring").has_value());  // no file yet
  storage::save_cached_probe(cache, a);
  storage::save_cached_probe(cache, b);
  auto got = storage::load_cached_probe(cache, a.device, 4096, 1 << 20, "uring");
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->points.size(), 2u);
  EXPECT_DOUBLE_EQ(got->points[1].burst_mbs, 800);
  EXPECT_EQ(got->points[1].request_bytes, 64u << 10);
  EXPECT_FALSE(storage::load_cached_probe(cache, a.device, 4096, 2 << 20, "uring").has_value());  // other size
  EXPECT_FALSE(storage::load_cached_probe(cache, a.device, 4096, 1 << 20, "pread").has_value());  // other backend
  // Saving a again replaces its entry and keeps b's.
  a.points[0].sustained_mbs = 1234;
  storage::save_cached_probe(cache, a);
  EXPECT_DOUBLE_EQ(storage::load_cached_probe(cache, a.device, 4096, 1 << 20, "uring")->points[0].sustained_mbs, 1234);
  EXPECT_DOUBLE_EQ(storage::load_cached_probe(cache, b.device, 4096, 1 << 20, "uring")->points[0].burst_mbs, 3000);
  // A corrupt cache is ignored (a warning), and the next save rewrites it.
  for (const char* junk : {"{not json", "[1, 2, 3]", "{\"version\": 3, \"probes\": [{\"device\": 5}]}",
                           "{\"version\": 3, \"probes\": [{\"device\": \"dev 8:1 fs 0xef53\", \"file\": \"x\", "
                           "\"expert_bytes\": 1048576, \"expert_extents\": 1, \"alignment\": 4096, \"io_mode\": \"uring\", \"probed_at\": 0, "
                           "\"seconds\": 1, \"points\": [{\"request_bytes\": 0, \"whole_expert\": true, \"queue_depth\": "
                           "1, \"burst_mbs\": 1, \"sustained_mbs\": 1, \"latency_us\": 1, \"pattern\": \"cold\"}]}]}"}) {
    std::ofstream(cache) << junk;
    EXPECT_FALSE(storage::load_cached_probe(cache, a.device, 4096, 1 << 20, "uring").has_value()) << junk;
    storage::save_cached_probe(cache, b);
    EXPECT_TRUE(storage::load_cached_probe(cache, b.device, 4096, 1 << 20, "uring").has_value()) << junk;
  }
  // A cache whose directory cannot be made: a clear error naming it.
  const std::string blocker = dir + "/a-file";
  std::ofstream(blocker) << "x";
  try {
    storage::save_cached_probe(blocker + "/probes.json", a);
    FAIL() << "saving under a regular file did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a-file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(storage::save_cached_probe("", a), Error);
  std::filesystem::remove_all(dir);
}

// Other work's share of the CPU time: the /proc/stat arithmetic (iowait counts as idle, guest
// time is not counted twice, this process's own ticks are not "other"), and a live measurement
// with child processes spinning on every CPU.
TEST(CpuShare, ArithmeticAndProcStat) {
  const std::string text =
      "cpu  100 20 30 400 50 6 4 10 7 0\ncpu0 50 10 15 200 25 3 2 5 7 0\nintr 12345\n";
  const auto t = parse_proc_stat(text);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->total, 620u);  // user..steal, not guest
  EXPECT_EQ(t->idle, 450u);   // idle + iowait
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n").has_value());
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 3\n").has_value());
  EXPECT_FALSE(parse_proc_stat("").has_value());
  // 1000 ticks, 400 idle, 200 own: 400 other.
  EXPECT_DOUBLE_EQ(other_cpu_share({1000, 500}, {2000, 900}, 200), 0.4);
  EXPECT_DOUBLE_EQ(other_cpu_share({1000, 500}, {2000, 900}, 900), 0.0);  // own ticks rounded up: clamped
  EXPECT_DOUBLE_EQ(other_cpu_share({1000, 500}, {2000, 500}, 0), 1.0);
  EXPECT_EQ(other_cpu_share({1000, 500}, {1000, 500}, 0), -1);  // empty interval
}

TEST(CpuShare, SeesOtherProcessesSpinning) {
  const long ncpu = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<pid_t> kids;
  const OtherCpuShare share;
  for (long i = 0; i < ncpu; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    kids.push_back(pid);
  }
  ::usleep(600'000);
  const double s = share.share();
  for (pid_t pid : kids) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  // The children had every CPU (only more load, or steal, can add to it); this process slept.
  EXPECT_GE(s, 0.5) << ncpu << " spinning children";
  EXPECT_LE(s, 1.0);
}

// A probe taken on a busy machine never replaces a quiet one in the cache; the share survives the
// cache and is optional in it (older caches); a busy probe says so in its table.
TEST(DeviceProbe, CacheKeepsTheQuietProbe) {
  const std::string dir = temp_dir();
  const std::string cache = dir + "/probes.json";
  DeviceProbe quiet;
  quiet.device = "dev 8:1 fs 0xef53";
  quiet.file = "/models/a.gguf";
  quiet.expert_bytes = 1 << 20;
  quiet.alignment = 4096;
  quiet.io_mode = "uring";
  quiet.other_cpu = 0.05;
  quiet.points = {pt(1 << 20, true, 1, 2000)};
  DeviceProbe busy = quiet;
  busy.other_cpu = 0.6;
  busy.points = {pt(1 << 20, true, 1, 700)};
  EXPECT_TRUE(busy.taken_busy());
  EXPECT_FALSE(quiet.taken_busy());
  EXPECT_NE(storage::format_probe(busy).find("busy machine"), std::string::npos) << storage::format_probe(busy);
  EXPECT_EQ(storage::format_probe(quiet).find("busy machine"), std::string::npos);
  auto load = [&] { return storage::load_cached_probe(cache, quiet.device, 4096, 1 << 20, "uring"); };
  EXPECT_TRUE(storage::save_cached_probe(cache, busy));  // nothing to keep: cached
  EXPECT_DOUBLE_EQ(load()->other_cpu, 0.6);
  EXPECT_TRUE(storage::save_cached_probe(cache, quiet));  // quiet replaces busy
  EXPECT_FALSE(storage::save_cached_probe(cache, busy));  // busy does not replace quiet
  auto got = load();
  ASSERT_TRUE(got.has_value());
  EXPECT_DOUBLE_EQ(got->points[0].burst_mbs, 2000);
  EXPECT_DOUBLE_EQ(got->other_cpu, 0.05);
  DeviceProbe quiet2 = quiet;
  quiet2.points[0].burst_mbs = 2500;
  EXPECT_TRUE(storage::save_cached_probe(cache, quiet2));  // quiet replaces quiet
  EXPECT_DOUBLE_EQ(load()->points[0].burst_mbs, 2500);
  // An entry without the share (an older cache) loads as unknown, which is not busy; one out of
  // range is ignored.
  const std::string entry = "{\"device\": \"dev 8:1 fs 0xef53\", \"file\": \"x\", \"expert_bytes\": 1048576, "
                            "\"expert_extents\": 1, \"alignment\": 4096, \"io_mode\": \"uring\", \"probed_at\": 0, "
                            "\"seconds\": 1, %s\"points\": [{\"request_bytes\": 1048576, \"whole_expert\": true, "
                            "\"queue_depth\": 1, \"burst_mbs\": 9, \"sustained_mbs\": 9, \"latency_us\": 1, \"pattern\": \"cold\"}]}";
  auto write_entry = [&](const char* extra, int version = 3) {
    char buf[1024];
    std::snprintf(buf, sizeof buf, entry.c_str(), extra);
    std::ofstream(cache) << "{\"version\": " << version << ", \"probes\": [" << buf << "]}";
  };
  // A version 2 cache (no loaded points) is not used: the disk is measured again.
  write_entry("", 2);
  EXPECT_FALSE(load().has_value());
  write_entry("");
  got = load();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->other_cpu, -1);
  EXPECT_FALSE(got->taken_busy());
  write_entry("\"other_cpu\": 7, ");
  EXPECT_FALSE(load().has_value());
  std::filesystem::remove_all(dir);
}

TEST(DeviceProbe, CeilingArithmetic) {
  // 10 tokens in 1 s, 50 MB read at 100 MB/s (0.05 s/token), 0.4 s waiting for reads.
  const IoCeiling c = io_ceiling(50'000'000, 0.4, 1.0, 10, {100, 0});
  EXPECT_DOUBLE_EQ(c.mb_per_token, 5);
  EXPECT_DOUBLE_EQ(c.t_io_s, 0.05);
  EXPECT_DOUBLE_EQ(c.t_compute_s, 0.06);
  EXPECT_NEAR(c.ceiling_tps, 1 / 0.06, 1e-9);
  EXPECT_NEAR(c.of_ceiling, 0.6, 1e-9);
  EXPECT_EQ(io_ceiling(1, 0, 1, 0, {100, 0}).ceiling_tps, 0);  // no tokens: no ceiling
  EXPECT_NE(format_io_ceiling(c, 8).find("60% of it"), std::string::npos) << format_io_ceiling(c, 8);
  EXPECT_EQ(format_io_ceiling(c, 8).find("above 105%"), std::string::npos);
  // Decoding faster than the ceiling (25 tok/s against 1 / 0.05 s): the probe under-measured the
  // disk, and the line says so and how to measure again.
  const IoCeiling over = io_ceiling(50'000'000, 0.0, 0.4, 10, {100, 0});
  EXPECT_NEAR(over.of_ceiling, 1.25, 1e-9);
  EXPECT_NE(format_io_ceiling(over, 8).find("above 105%"), std::string::npos) << format_io_ceiling(over, 8);
  EXPECT_NE(format_io_ceiling(over, 8).find("--probe-refresh"), std::string::npos);
}

// Two disk rates: the reads beside the compute at the loaded rate, the rest after it at the idle
// rate; one rate gives max(bytes / rate, compute).
TEST(DeviceProbe, CeilingWithALoadedAndAnIdleRate) {
  // 1 MB, 10 ms of compute, 50 MB/s beside it (0.5 MB), the other 0.5 MB at 100 MB/s: 15 ms.
  EXPECT_NEAR(decode_ceiling_seconds(1e6, 0.01, 50, 100), 0.015, 1e-12);
  EXPECT_NEAR(decode_ceiling_seconds(4e5, 0.01, 50, 100), 0.01, 1e-12);   // all beside the compute
  EXPECT_NEAR(decode_ceiling_seconds(1e6, 0.01, 50, 50), 0.02, 1e-12);    // one rate: bytes / rate
  EXPECT_NEAR(decode_ceiling_seconds(1e6, 0.01, 50, 0), 0.02, 1e-12);     // idle unknown: the same
  EXPECT_NEAR(decode_ceiling_seconds(1e6, 0.01, 50, 30), 0.02, 1e-12);    // idle below loaded: loaded
  EXPECT_NEAR(decode_ceiling_seconds(1e6, 0.01, 0, 100), 0.01, 1e-12);    // no disk figure: compute
  EXPECT_NEAR(decode_ceiling_seconds(1e6, 0, 50, 100), 0.01, 1e-12);      // no compute: idle rate
  // No split of the reads between compute and waiting beats it: x bytes beside the compute (at
  // most 50 MB/s x 10 ms) and the rest while waiting at 100 MB/s.
  for (double x = 0; x <= 5e5; x += 5e4) EXPECT_GE(0.01 + (1e6 - x) / 100e6, 0.015 - 1e-12);
  // io_ceiling: 10 tokens in 1 s, 5 MB each, 60 ms of compute: 3 MB beside it at 50 MB/s, 2 MB
  // after it at 100 MB/s = 80 ms -> 12.5 tok/s, decode at 80% of it.
  const IoCeiling c = io_ceiling(50'000'000, 0.4, 1.0, 10, {50, 100});
  EXPECT_NEAR(c.ceiling_tps, 12.5, 1e-9);
  EXPECT_NEAR(c.of_ceiling, 0.8, 1e-9);
  EXPECT_DOUBLE_EQ(c.idle_mbs, 100);
  EXPECT_NE(format_io_ceiling(c, 8).find("100 MB/s with idle cores"), std::string::npos) << format_io_ceiling(c, 8);
}

// The engine on a fake device: --read-chunk auto picks chunks where the device serves parallel
// ops faster, the output stays bit-identical, and the decode ceiling from the probe bounds the
// decode speed the engine reaches (<= 105%). The fake device's timing is the host's: a probe
// taken while other tests starve the machine under-measures it (seen in CI: 152 MB/s at queue
// depth 8 from a device that serves 800, then a decode at 115% of that ceiling; idle, about one
// quick probe in six is passed by 5-10%). So a ceiling passed by more than 5% is measured again
// with a fresh probe and a fresh decode, up to 5 times, the ceiling taking the best bandwidth
// probed so far (still a bandwidth the device was seen to serve); a ceiling that is wrong by
// construction fails every one of them.
TEST(DeviceProbe, EngineCeilingHoldsOnTheFakeDevice) {
  LES_REQUIRE_FILE(tiny_moe_path());
  EngineOptions o;
  o.model_path = tiny_moe_path();
  o.context.n_ctx = 256;
  EngineRequest req;
  req.n_predict = 24;
  req.sampling.temp = 0;
  Engine resident(o);
  const std::vector<int32_t> ids = resident.tokenize("In the beginning God created the heaven and the earth.", false);
  const EngineResult want = resident.generate(ids, req, nullptr);

  o.mem = 64ull << 20;
  o.streaming.io_mode = storage::IoMode::fake;
  o.streaming.io.fake.latency = std::chrono::microseconds(50);
  o.streaming.io.fake.op_mbs = 100;
  o.streaming.io.fake.device_mbs = 1000;
  o.streaming.read_chunk_auto = true;
  o.probe_quick = true;
  std::string attempts;
  double best_mbs = 0, best_idle_mbs = 0;
  constexpr int kAttempts = 5;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    Engine e(o);
    ASSERT_NE(e.device_probe(), nullptr);
    EXPECT_FALSE(e.device_probe_cached());
    // The chunk in use is the probe's choice for this schedule (chunked reads' bit-identity is
    // Streaming.ChunkedReadsAreBitIdenticalOnEveryBackend's; the rule is ReadShapingFollowsTheProbe's).
    auto check_model = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
    EXPECT_EQ(e.read_chunk(),
              storage::choose_read_chunk(*e.device_probe(), experts_in_flight(o.streaming, *check_model),
                                         o.streaming.queue_depth)
                  .chunk)
        << storage::format_probe(*e.device_probe());
    EXPECT_GT(e.io_rates().loaded_mbs, 0);
    best_mbs = std::max(best_mbs, e.io_rates().loaded_mbs);
    best_idle_mbs = std::max(best_idle_mbs, e.io_rates().idle_mbs);

    StreamingExperts* ex = e.experts();
    ASSERT_NE(ex, nullptr);
    uint64_t bytes0 = 0;
    double stall0 = 0, t0 = 0;
    bool first = true;
    auto now = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    req.on_token = [&](int32_t) {
      if (!first) return;
      const LayerStreamStats t = ex->stats().total();
      bytes0 = t.bytes_demand + t.bytes_prefetch;
      stall0 = t.stall_s;
      t0 = now();
      first = false;
    };
    const EngineResult got = e.generate(ids, req, nullptr);
    const double secs = now() - t0;
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.stats.final_logits_hash, want.stats.final_logits_hash);
    const LayerStreamStats t = ex->stats().total();
    ASSERT_GT(t.bytes_demand + t.bytes_prefetch, bytes0) << "the decode read nothing: no ceiling to check";
    const IoCeiling c = io_ceiling(t.bytes_demand + t.bytes_prefetch - bytes0, t.stall_s - stall0, secs,
                                   static_cast<uint64_t>(got.n_generated - 1), {best_mbs, best_idle_mbs});
    std::printf("attempt %d: %s", attempt, format_io_ceiling(c, o.streaming.queue_depth).c_str());
    EXPECT_GT(c.t_io_s, 0);
    attempts += "attempt " + std::to_string(attempt) + ": " + format_io_ceiling(c, o.streaming.queue_depth) +
                storage::format_probe(*e.device_probe());
    if (c.of_ceiling <= 1.05) return;
  }
  ADD_FAILURE() << "decode above 105% of the probe's ceiling with " << kAttempts << " fresh probes:\n" << attempts;
}

}  // namespace
}  // namespace les
