// Storage I/O engines: exact data for every backend, priority order (demand overtakes queued
// prefetches), cancel, promote, short reads, EINTR, EIO, truncated files, counters, and no
// deadlock at queue depth 1. Real files live under the build directory (O_DIRECT may be refused
// on tmpfs); override with LES_TEST_IO_DIR.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "les/sched/io_probe.h"
#include "les/sched/streaming_experts.h"
#include "les/storage/device_probe.h"
#include "les/storage/io.h"
#include "les/storage/io_internal.h"
#include "les/util/error.h"
#include "skip.h"

using namespace les::storage;
using namespace std::chrono_literals;

namespace {

std::string io_test_base() {
  if (const char* e = std::getenv("LES_TEST_IO_DIR")) return e;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) return exe.parent_path().string();
  return std::filesystem::temp_directory_path().string();
}

// A temporary directory removed with everything in it at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = io_test_base() + "/storage-io-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const char* d = mkdtemp(buf.data());
    if (d) path = d;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
}

// Waits for `n` completions (or fails after a generous deadline: a hang is a bug).
std::vector<IoCompletion> drain(IoEngine& e, size_t n) {
  std::vector<IoCompletion> out;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) e.wait(out, 100ms);
  EXPECT_EQ(out.size(), n) << "completions missing (deadlock?)";
  return out;
}

// Waits until the fake log shows n started ops.
void wait_started(const FakeIoLog& log, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (log.started().size() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GE(log.started().size(), n);
}

std::vector<uint64_t> started_tags(const FakeIoLog& log) {
  std::vector<uint64_t> tags;
  for (const auto& r : log.started()) tags.push_back(r.tag);
  return tags;
}

std::vector<IoMode> real_modes() {
  std::vector<IoMode> m;
  if (have_uring()) m.push_back(IoMode::uring);
  m.push_back(IoMode::pread);
  m.push_back(IoMode::naive);
  return m;
}

// Creates an engine, skipping the test when io_uring cannot be set up on this machine.
std::unique_ptr<IoEngine> engine_or_skip(IoMode mode, std::shared_ptr<ReadFile> f, const IoOptions& o) {
  try {
    return make_io_engine(mode, std::move(f), o);
  } catch (const les::Error& e) {
    if (mode == IoMode::uring) return nullptr;
    throw;
  }
}

// One request read with a single op of a whole small memory file.
IoRequest one_op(uint64_t tag, IoPriority p, void* dst, uint64_t off, uint64_t len) {
  IoRequest r;
  r.tag = tag;
  r.priority = p;
  r.ops.push_back(IoOp{off, len, dst});
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST(StorageIoAlign, Helpers) {
  EXPECT_EQ(align_down(0, 4096), 0u);
  EXPECT_EQ(align_down(4097, 4096), 4096u);
  EXPECT_EQ(align_up(1, 4096), 4096u);
  EXPECT_EQ(align_up(8192, 4096), 8192u);
  EXPECT_TRUE(is_aligned(12288, 4096));
  EXPECT_FALSE(is_aligned(12289, 4096));

  AlignedExtent e = align_extent(5000, 10000, 4096);
  EXPECT_EQ(e.file_offset, 4096u);
  EXPECT_EQ(e.skip, 904u);
  EXPECT_EQ(e.length, 12288u);  // [4096, 16384) covers [5000, 15000)
  e = align_extent(8192, 4096, 4096);
  EXPECT_EQ(e.file_offset, 8192u);
  EXPECT_EQ(e.skip, 0u);
  EXPECT_EQ(e.length, 4096u);
  e = align_extent(123, 0, 4096);
  EXPECT_EQ(e.length, 0u);
  e = align_extent(77, 5, 1);
  EXPECT_EQ(e.file_offset, 77u);
  EXPECT_EQ(e.length, 5u);
  EXPECT_EQ(e.skip, 0u);

  AlignedBuffer b(10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
  EXPECT_EQ(b.size(), 10000u);
  EXPECT_EQ(b.capacity(), 12288u);
  uint8_t* p = b.data();
  AlignedBuffer c(std::move(b));
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_THROW(AlignedBuffer(16, 3), les::Error);
}

// Minor page faults of the calling thread while it reads one byte of every 4 KiB page of
// [p, p + n) (and the last byte); *sum gets the bytes' sum. Not instrumented: a sanitizer's
// shadow memory would fault on its own.
__attribute__((no_sanitize_address, no_sanitize_thread, noinline)) long faults_reading(const uint8_t* p, size_t n,
                                                                                        uint64_t* sum) {
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  uint64_t s = 0;
  for (size_t o = 0; o < n; o += 4096) s += *static_cast<const volatile uint8_t*>(p + o);
  s += *static_cast<const volatile uint8_t*>(p + n - 1);
  getrusage(RUSAGE_THREAD, &after);
  *sum = s;
  return after.ru_minflt - before.ru_minflt;
}

// populate_parallel makes every page of its range resident, whatever the cuts between its threads:
// touching the range afterwards faults nothing, while the same touches of an unpopulated range
// fault (at least once per 2 MiB even where the kernel maps huge zero pages). Ranges that start
// and end off 4 KiB and 2 MiB boundaries, 1 to 5 threads; bytes outside the range keep their value.
TEST(StorageIoAlign, PopulateParallelMakesTheWholeRangeResident) {
  constexpr size_t kMiB = size_t{1} << 20;
  auto touch_faults = [](const uint8_t* p, size_t n) {
    uint64_t sum = 0;
    const long faults = faults_reading(p, n, &sum);
    EXPECT_EQ(sum, 0u);  // fresh pages are zeros
    return faults;
  };
  {
    AlignedBuffer cold(40 * kMiB);
    EXPECT_GE(touch_faults(cold.data() + kMiB, 24 * kMiB), 12) << "the control range should fault";
  }
  {
    // qemu-user accepts MADV_POPULATE_WRITE and does nothing: there even populate() leaves the
    // pages to fault, and the cuts cannot be checked.
    AlignedBuffer one(40 * kMiB);
    one.populate(kMiB, 24 * kMiB);
    if (touch_faults(one.data() + kMiB, 24 * kMiB) > 2) LES_SKIP_PLATFORM("populate() does not pre-fault pages here (an emulator?)");
  }
  for (int threads = 1; threads <= 5; ++threads) {
    AlignedBuffer b(64 * kMiB);
    b.data()[0] = 7;  // before the range: must keep its value
    const size_t off = 3 * kMiB + 4096 * 3 + 100, len = 37 * kMiB + 12345;
    b.data()[off + len] = 9;  // just after it
    b.populate_parallel(off, len, threads);
    EXPECT_LE(touch_faults(b.data() + off, len), 2) << threads << " threads";
    EXPECT_EQ(b.data()[0], 7);
    EXPECT_EQ(b.data()[off + len], 9);
  }
}

// Unless one is asked for, every backend choice of the library is the one the CLI makes: io_uring
// where this kernel lets the process use it, else pread (qemu-user, seccomp'd containers).
TEST(StorageIoAlign, LibraryDefaultsFollowTheKernel) {
  const IoMode want = have_uring() ? IoMode::uring : IoMode::pread;
  EXPECT_EQ(default_io_mode(), want);
  EXPECT_EQ(les::StreamingOptions{}.io_mode, want);
  EXPECT_EQ(les::IoProbeOptions{}.io_mode, want);
  EXPECT_EQ(ProbeOptions{}.io_mode, want);
  // The default can be set up here: a backend of that mode opens a file.
  const std::string path = std::filesystem::temp_directory_path() / ("les-default-io-" + std::to_string(getpid()));
  {
    std::vector<uint8_t> bytes(8192, 7);
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  EXPECT_NO_THROW(make_io_engine(default_io_mode(), open_direct(path)));
  std::remove(path.c_str());
}

TEST(StorageIoAlign, ParseMode) {
  EXPECT_EQ(parse_io_mode("uring"), IoMode::uring);
  EXPECT_EQ(parse_io_mode("io_uring"), IoMode::uring);
  EXPECT_EQ(parse_io_mode("pread"), IoMode::pread);
  EXPECT_EQ(parse_io_mode("naive"), IoMode::naive);
  EXPECT_EQ(parse_io_mode("fake"), IoMode::fake);
  EXPECT_THROW(parse_io_mode("mmap"), les::Error);
  EXPECT_STREQ(io_mode_name(IoMode::naive), "naive");
}

TEST(StorageIoFile, OpenErrorsNameThePath) {
  try {
    open_direct("/nonexistent/les/model.gguf");
    FAIL() << "no throw";
  } catch (const les::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/les/model.gguf"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_buffered("/nonexistent/x"), les::Error);
}

// Every backend returns the file's bytes for random (unaligned) extents turned into aligned
// reads, several ops per request, at several queue depths, including the file's unaligned tail.
TEST(StorageIoData, RandomExtentsEveryBackend) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/data.bin";
  const size_t file_size = (3u << 20) + 1234;  // tail not 4 KiB aligned
  const std::vector<uint8_t> bytes = random_bytes(file_size, 42);
  write_file(path, bytes);

  std::vector<std::pair<IoMode, std::shared_ptr<ReadFile>>> setups;
  auto direct = open_direct(path);
  if (direct->direct_refused()) std::printf("note: %s refused O_DIRECT; testing buffered\n", dir.path.c_str());
  for (IoMode m : real_modes()) setups.emplace_back(m, direct);
  setups.emplace_back(IoMode::fake, make_memory_file(bytes, "mem", 4096));
  setups.emplace_back(IoMode::fake, direct);

  for (auto& [mode, file] : setups) {
    for (int qd : {1, 4, 16}) {
      SCOPED_TRACE(std::string(io_mode_name(mode)) + " qd " + std::to_string(qd) + " " + file->path());
      auto eng = engine_or_skip(mode, file, IoOptions{qd, 0});
      if (!eng) {
        std::printf("note: io_uring unavailable here, skipped\n");
        continue;
      }
      std::mt19937_64 rng(1000 + qd);
      struct Want {
        uint64_t offset, length, skip;
        AlignedBuffer buf;
      };
      std::vector<std::vector<Want>> wants;
      const int n_req = 60;
      uint64_t total_ops = 0;
      for (int i = 0; i < n_req; ++i) {
        std::vector<Want> ws;
        IoRequest req;
        req.tag = static_cast<uint64_t>(i);
        req.priority = (rng() & 1) ? IoPriority::demand : IoPriority::prefetch;
        const int n_ops = 1 + static_cast<int>(rng() % 3);
        for (int k = 0; k < n_ops; ++k) {
          uint64_t len = 1 + rng() % 300000;
          uint64_t off = rng() % (file_size - len);
          if (i == 0 && k == 0) {  // the tail: aligned read extends past EOF
            len = 5000;
            off = file_size - len;
          }
          const AlignedExtent ext = align_extent(off, len, file->alignment());
          ws.push_back(Want{off, len, ext.skip, AlignedBuffer(ext.length)});
          req.ops.push_back(IoOp{ext.file_offset, ext.length, ws.back().buf.data()});
        }
        total_ops += req.ops.size();
        wants.push_back(std::move(ws));
        // Buffers moved into `wants` keep their addresses (heap blocks), so ops stay valid.
        eng->submit(std::move(req));
      }
      const auto done = drain(*eng, n_req);
      for (const auto& c : done) {
        ASSERT_TRUE(c.ok()) << c.error;
        for (const Want& w : wants[c.tag]) {
          ASSERT_EQ(std::memcmp(w.buf.data() + w.skip, bytes.data() + w.offset, w.length), 0)
              << "tag " << c.tag << " offset " << w.offset << " length " << w.length;
        }
      }
      const IoCounters k = eng->counters();
      EXPECT_EQ(k.requests, static_cast<uint64_t>(n_req));
      EXPECT_EQ(k.ops, total_ops);
      EXPECT_LE(k.max_in_flight, static_cast<uint32_t>(qd));
      EXPECT_EQ(k.errors, 0u);
      EXPECT_EQ(eng->pending(), 0u);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Priority queue (fake backend, queue depth 1, a gate holding the first op in flight)

struct GatedFake {
  std::vector<uint8_t> bytes = random_bytes(64 * 1024, 7);
  std::shared_ptr<FakeIoLog> log = std::make_shared<FakeIoLog>();
  std::shared_ptr<FakeIoGate> gate = std::make_shared<FakeIoGate>(false);
  std::unique_ptr<IoEngine> eng;
  std::vector<std::vector<uint8_t>> dst = std::vector<std::vector<uint8_t>>(64, std::vector<uint8_t>(1024));

  explicit GatedFake(int qd = 1, uint64_t prefetch_bytes = 0) {
    IoOptions o{qd, 0};
    o.prefetch_bytes = prefetch_bytes;
    o.fake.log = log;
    o.fake.gate = gate;
    eng = make_io_engine(IoMode::fake, make_memory_file(bytes, "gated"), o);
  }
  ~GatedFake() { gate->open(); }  // never destroy the engine with ops held at the gate
  void submit(uint64_t tag, IoPriority p) { eng->submit(one_op(tag, p, dst[tag].data(), tag * 1024, 1024)); }
};

TEST(StorageIoQueue, DemandOvertakesQueuedPrefetch) {
  GatedFake g;
  g.submit(1, IoPriority::prefetch);
  wait_started(*g.log, 1);  // 1 is in flight, held at the gate
  for (uint64_t t = 2; t <= 5; ++t) g.submit(t, IoPriority::prefetch);
  g.submit(10, IoPriority::demand);
  g.submit(11, IoPriority::demand);
  g.gate->open();
  const auto done = drain(*g.eng, 7);
  EXPECT_EQ(started_tags(*g.log), (std::vector<uint64_t>{1, 10, 11, 2, 3, 4, 5}));
  for (const auto& c : done) {
    ASSERT_TRUE(c.ok()) << c.error;
    EXPECT_EQ(std::memcmp(g.dst[c.tag].data(), g.bytes.data() + c.tag * 1024, 1024), 0);
  }
  EXPECT_EQ(g.eng->counters().max_in_flight, 1u);
}

TEST(StorageIoQueue, CancelQueuedRequests) {
  GatedFake g;
  g.submit(1, IoPriority::prefetch);
  wait_started(*g.log, 1);
  g.submit(2, IoPriority::prefetch);
  g.submit(3, IoPriority::prefetch);
  g.submit(4, IoPriority::demand);
  EXPECT_EQ(g.eng->pending(), 4u);
  EXPECT_FALSE(g.eng->cancel(1));    // already started
  EXPECT_TRUE(g.eng->cancel(2));     // queued prefetch
  EXPECT_TRUE(g.eng->cancel(4));     // queued demand
  EXPECT_FALSE(g.eng->cancel(4));    // gone
  EXPECT_FALSE(g.eng->cancel(999));  // never submitted
  EXPECT_EQ(g.eng->pending(), 2u);
  g.gate->open();
  auto done = drain(*g.eng, 2);
  std::vector<uint64_t> tags;
  for (const auto& c : done) tags.push_back(c.tag);
  std::sort(tags.begin(), tags.end());
  EXPECT_EQ(tags, (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(started_tags(*g.log), (std::vector<uint64_t>{1, 3}));
  std::vector<IoCompletion> more;
  EXPECT_EQ(g.eng->wait(more, 10ms), 0u);  // nothing pending: returns at once
  EXPECT_EQ(g.eng->counters().cancelled, 2u);
  EXPECT_EQ(g.eng->counters().requests, 2u);
  // A cancelled tag may be reused.
  g.submit(2, IoPriority::demand);
  EXPECT_EQ(drain(*g.eng, 1)[0].tag, 2u);
}

TEST(StorageIoQueue, PromoteRaisesQueuedPrefetch) {
  GatedFake g;
  g.submit(1, IoPriority::prefetch);
  wait_started(*g.log, 1);
  for (uint64_t t = 2; t <= 4; ++t) g.submit(t, IoPriority::prefetch);
  g.submit(10, IoPriority::demand);
  EXPECT_TRUE(g.eng->promote(4));    // now behind 10, ahead of 2 and 3
  EXPECT_TRUE(g.eng->promote(10));   // already demand
  EXPECT_TRUE(g.eng->promote(1));    // in flight: nothing left to move, still pending
  EXPECT_FALSE(g.eng->promote(99));  // unknown
  g.gate->open();
  const auto done = drain(*g.eng, 5);
  EXPECT_EQ(started_tags(*g.log), (std::vector<uint64_t>{1, 10, 4, 2, 3}));
  for (const auto& c : done) {
    const bool demand = c.tag == 4 || c.tag == 10 || c.tag == 1;
    EXPECT_EQ(c.priority, demand ? IoPriority::demand : IoPriority::prefetch) << c.tag;
  }
  EXPECT_EQ(g.eng->counters().promoted, 2u);
}

// Speculative reads (deep guesses) use only the device's idle time: they start after every
// queued demand and prefetch read and only when nothing is in flight; promote() raises one to
// prefetch priority, and a "promotion" to a lower priority changes nothing.
TEST(StorageIoQueue, SpeculativeReadsFillIdleTimeOnly) {
  GatedFake g(/*qd=*/4);
  g.submit(1, IoPriority::speculative);  // the device is idle: starts at once
  wait_started(*g.log, 1);
  g.submit(2, IoPriority::speculative);
  g.submit(3, IoPriority::speculative);
  g.submit(4, IoPriority::prefetch);     // starts beside 1 (queue depth 4)
  g.submit(10, IoPriority::demand);
  wait_started(*g.log, 3);
  std::this_thread::sleep_for(20ms);     // 2 or 3 would have started by now
  // (4 and 10 start on two worker threads at once: their order in the log is either.)
  auto first = [&](size_t n) {
    auto t = started_tags(*g.log);
    t.resize(std::min(n, t.size()));
    std::sort(t.begin(), t.end());
    return t;
  };
  EXPECT_EQ(g.log->started().size(), 3u);
  EXPECT_EQ(first(3), (std::vector<uint64_t>{1, 4, 10}));
  EXPECT_TRUE(g.eng->promote(3, IoPriority::prefetch));
  wait_started(*g.log, 4);
  EXPECT_EQ(started_tags(*g.log)[3], 3u);
  EXPECT_TRUE(g.eng->promote(2, IoPriority::speculative));
  EXPECT_TRUE(g.eng->promote(10, IoPriority::prefetch));  // demand already: no change
  g.gate->open();
  const auto done = drain(*g.eng, 5);
  ASSERT_EQ(g.log->started().size(), 5u);
  EXPECT_EQ(started_tags(*g.log)[4], 2u);  // last: nothing else was in flight any more
  for (const auto& c : done) {
    ASSERT_TRUE(c.ok()) << c.error;
    EXPECT_EQ(std::memcmp(g.dst[c.tag].data(), g.bytes.data() + c.tag * 1024, 1024), 0);
    const IoPriority want = c.tag == 10 ? IoPriority::demand
                            : c.tag == 3 || c.tag == 4 ? IoPriority::prefetch
                                                       : IoPriority::speculative;
    EXPECT_EQ(c.priority, want) << c.tag;
  }
  EXPECT_EQ(g.eng->counters().promoted, 1u);
}

// A multi-op prefetch that has started keeps its remaining ops queued; a demand request goes
// between them (ops, not whole requests, are the unit of the queue depth).
TEST(StorageIoQueue, DemandOvertakesRestOfStartedPrefetch) {
  GatedFake g;
  IoRequest r;
  r.tag = 1;
  r.priority = IoPriority::prefetch;
  for (int k = 0; k < 3; ++k) r.ops.push_back(IoOp{uint64_t(k) * 1024, 1024, g.dst[1 + k].data()});
  g.eng->submit(std::move(r));
  wait_started(*g.log, 1);
  g.submit(10, IoPriority::demand);
  EXPECT_FALSE(g.eng->cancel(1));  // partly started
  g.gate->open();
  drain(*g.eng, 2);
  const auto log = g.log->started();
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0].tag, 1u);
  EXPECT_EQ(log[1].tag, 10u);
  EXPECT_EQ(log[2].tag, 1u);
  EXPECT_EQ(log[3].tag, 1u);
}

// prefetch_bytes bounds the prefetch bytes in the device (one prefetch op may always run), so a
// demand read finds free queue slots and waits behind at most that many prefetch bytes.
TEST(StorageIoQueue, PrefetchBytesInFlightAreBounded) {
  GatedFake g(/*qd=*/8, /*prefetch_bytes=*/2048);  // two 1 KiB prefetch ops at a time
  for (uint64_t t = 1; t <= 6; ++t) g.submit(t, IoPriority::prefetch);
  wait_started(*g.log, 2);
  std::this_thread::sleep_for(20ms);  // a third prefetch op would have started by now
  EXPECT_EQ(g.log->started().size(), 2u);
  g.submit(10, IoPriority::demand);   // not held back by the prefetch limit
  g.submit(11, IoPriority::demand);
  wait_started(*g.log, 4);
  EXPECT_EQ(started_tags(*g.log), (std::vector<uint64_t>{1, 2, 10, 11}));
  g.gate->open();
  const auto done = drain(*g.eng, 8);
  for (const auto& c : done) {
    ASSERT_TRUE(c.ok()) << c.error;
    EXPECT_EQ(std::memcmp(g.dst[c.tag].data(), g.bytes.data() + c.tag * 1024, 1024), 0);
  }
  EXPECT_EQ(g.log->started().size(), 8u);
  // An op larger than the limit still runs when no other prefetch is in flight.
  GatedFake big(/*qd=*/4, /*prefetch_bytes=*/512);
  big.submit(1, IoPriority::prefetch);
  big.submit(2, IoPriority::prefetch);
  wait_started(*big.log, 1);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(big.log->started().size(), 1u);
  big.gate->open();
  drain(*big.eng, 2);
  EXPECT_EQ(started_tags(*big.log), (std::vector<uint64_t>{1, 2}));
}

// ---------------------------------------------------------------------------------------------
// Faults

TEST(StorageIoFaults, ShortReadsAndEintrRetriedToCompletion) {
  const auto bytes = random_bytes(200000, 3);
  auto file = make_memory_file(bytes, "short.bin");
  IoOptions o{4, 0};
  o.fake.max_read = 4096;
  o.fake.eintr_every = 3;
  auto eng = make_io_engine(IoMode::fake, file, o);
  std::vector<uint8_t> dst(100000);
  eng->submit(one_op(1, IoPriority::demand, dst.data(), 777, dst.size()));
  const auto done = drain(*eng, 1);
  ASSERT_TRUE(done[0].ok()) << done[0].error;
  EXPECT_EQ(done[0].bytes, dst.size());
  EXPECT_EQ(std::memcmp(dst.data(), bytes.data() + 777, dst.size()), 0);
  const IoCounters k = eng->counters();
  const uint64_t data_calls = (dst.size() + 4095) / 4096;  // 25
  EXPECT_EQ(k.ops, 1u);
  EXPECT_EQ(k.short_reads, data_calls - 1);
  EXPECT_GT(k.syscalls, data_calls);  // plus the EINTR calls
  EXPECT_EQ(k.retries, k.syscalls - 1);
  EXPECT_EQ(k.bytes, dst.size());
}

// On a direct (4 KiB aligned) file a short read that stops mid-block resumes at the last
// aligned position, so every reissued read is aligned.
TEST(StorageIoFaults, ShortReadResumesAligned) {
  const auto bytes = random_bytes(64 * 1024, 5);
  auto file = make_memory_file(bytes, "aligned.bin", 4096);
  AlignedBuffer dst(32 * 1024);
  std::vector<std::pair<uint64_t, size_t>> calls;
  const IoOp op{8192, 32 * 1024, dst.data()};
  const detail::OpResult r = detail::read_fully(*file, op, [&](void* d, size_t n, uint64_t off) -> int64_t {
    calls.emplace_back(off, n);
    EXPECT_EQ(off % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 4096, 0u);
    return file->read_at(d, std::min<size_t>(n, 5000), off);  // 5000: not block aligned
  });
  ASSERT_EQ(r.err, 0) << r.error;
  EXPECT_EQ(r.bytes, 32u * 1024);
  EXPECT_EQ(std::memcmp(dst.data(), bytes.data() + 8192, 32 * 1024), 0);
  EXPECT_EQ(calls.size(), 8u);  // each call advances one aligned block
}

TEST(StorageIoFaults, EioOnChosenOffsetNamesTheOffset) {
  const auto bytes = random_bytes(256 * 1024, 9);
  auto file = make_memory_file(bytes, "/models/eio.bin");
  IoOptions o{2, 0};
  o.fake.eio_offsets = {100000};
  auto eng = make_io_engine(IoMode::fake, file, o);
  std::vector<uint8_t> a(65536, 0xAB), b(65536), c(65536);
  IoRequest bad;
  bad.tag = 1;
  bad.ops = {IoOp{0, 65536, a.data()}, IoOp{65536, 65536, b.data()}};  // second covers 100000
  eng->submit(std::move(bad));
  eng->submit(one_op(2, IoPriority::prefetch, c.data(), 131072, 65536));
  const auto done = drain(*eng, 2);
  for (const auto& d : done) {
    if (d.tag == 1) {
      EXPECT_FALSE(d.ok());
      EXPECT_EQ(d.err, EIO);
      EXPECT_NE(d.error.find("/models/eio.bin"), std::string::npos) << d.error;
      EXPECT_NE(d.error.find("at offset 65536"), std::string::npos) << d.error;
      EXPECT_NE(d.error.find("65536 bytes"), std::string::npos) << d.error;
      EXPECT_NE(d.error.find(std::strerror(EIO)), std::string::npos) << d.error;
    } else {
      EXPECT_TRUE(d.ok()) << d.error;
      EXPECT_EQ(std::memcmp(c.data(), bytes.data() + 131072, 65536), 0);
    }
  }
  EXPECT_EQ(eng->counters().errors, 1u);
}

TEST(StorageIoFaults, EioAfterNOps) {
  const auto bytes = random_bytes(64 * 1024, 11);
  IoOptions o{1, 0};
  o.fake.eio_after_ops = 3;
  auto eng = make_io_engine(IoMode::fake, make_memory_file(bytes, "after.bin"), o);
  std::vector<std::vector<uint8_t>> dst(6, std::vector<uint8_t>(1024));
  for (uint64_t t = 0; t < 6; ++t) eng->submit(one_op(t, IoPriority::demand, dst[t].data(), t * 1024, 1024));
  const auto done = drain(*eng, 6);
  for (const auto& d : done) EXPECT_EQ(d.ok(), d.tag < 3) << d.tag << " " << d.error;
}

// A request whose op fails does not read its remaining ops.
TEST(StorageIoFaults, FailedRequestDropsItsUnstartedOps) {
  const auto bytes = random_bytes(64 * 1024, 13);
  IoOptions o{1, 0};
  o.fake.eio_offsets = {0};
  o.fake.log = std::make_shared<FakeIoLog>();
  auto eng = make_io_engine(IoMode::fake, make_memory_file(bytes, "drop.bin"), o);
  std::vector<uint8_t> dst(4 * 1024);
  IoRequest r;
  r.tag = 5;
  for (int k = 0; k < 4; ++k) r.ops.push_back(IoOp{uint64_t(k) * 1024, 1024, dst.data() + k * 1024});
  eng->submit(std::move(r));
  const auto done = drain(*eng, 1);
  EXPECT_FALSE(done[0].ok());
  EXPECT_EQ(o.fake.log->started().size(), 1u);
  EXPECT_EQ(eng->counters().ops, 1u);
}

// A file truncated after it was opened: every real backend reports a clear error naming the
// file and the offsets instead of returning short data.
TEST(StorageIoFaults, TruncatedFileIsAnError) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  for (IoMode mode : real_modes()) {
    SCOPED_TRACE(io_mode_name(mode));
    const std::string path = dir.path + "/trunc-" + io_mode_name(mode) + ".bin";
    write_file(path, random_bytes(1 << 20, 17));
    auto file = mode == IoMode::naive ? open_buffered(path) : open_direct(path);
    ASSERT_EQ(::truncate(path.c_str(), 512 * 1024), 0);
    auto eng = engine_or_skip(mode, file, IoOptions{4, 0});
    if (!eng) continue;
    AlignedBuffer a(128 * 1024), b(128 * 1024);
    eng->submit(one_op(1, IoPriority::demand, a.data(), 448 * 1024, 128 * 1024));  // straddles
    eng->submit(one_op(2, IoPriority::demand, b.data(), 640 * 1024, 128 * 1024));  // past new end
    const auto done = drain(*eng, 2);
    for (const auto& d : done) {
      EXPECT_FALSE(d.ok()) << d.tag;
      EXPECT_NE(d.error.find(path), std::string::npos) << d.error;
      EXPECT_NE(d.error.find("truncated"), std::string::npos) << d.error;
      const std::string off = d.tag == 1 ? "at offset 458752" : "at offset 655360";
      EXPECT_NE(d.error.find(off), std::string::npos) << d.error;
    }
    // Reads within the remaining part still work.
    eng->submit(one_op(3, IoPriority::demand, a.data(), 0, 128 * 1024));
    EXPECT_TRUE(drain(*eng, 1)[0].ok());
  }
}

TEST(StorageIoFaults, InvalidRequestsThrow) {
  const auto bytes = random_bytes(64 * 1024, 19);
  auto eng = make_io_engine(IoMode::fake, make_memory_file(bytes, "inv.bin", 4096), IoOptions{2, 0});
  AlignedBuffer buf(8192);
  try {
    eng->submit(one_op(1, IoPriority::demand, buf.data(), 100, 4096));
    FAIL() << "misaligned offset accepted";
  } catch (const les::Error& e) {
    EXPECT_NE(std::string(e.what()).find("inv.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not aligned"), std::string::npos) << e.what();
  }
  EXPECT_THROW(eng->submit(one_op(1, IoPriority::demand, buf.data() + 1, 0, 4096)), les::Error);
  EXPECT_THROW(eng->submit(one_op(1, IoPriority::demand, buf.data(), 0, 100)), les::Error);
  EXPECT_THROW(eng->submit(one_op(1, IoPriority::demand, buf.data(), 64 * 1024, 4096)), les::Error);
  EXPECT_EQ(eng->pending(), 0u);
  // Duplicate pending tag.
  auto gate = std::make_shared<FakeIoGate>(false);
  IoOptions o{1, 0};
  o.fake.gate = gate;
  auto held = make_io_engine(IoMode::fake, make_memory_file(bytes, "dup.bin"), o);
  held->submit(one_op(7, IoPriority::demand, buf.data(), 0, 4096));
  EXPECT_THROW(held->submit(one_op(7, IoPriority::demand, buf.data() + 4096, 4096, 4096)), les::Error);
  gate->open();
  EXPECT_TRUE(drain(*held, 1)[0].ok());
  // Bad options, backends that cannot serve a memory file.
  EXPECT_THROW(make_io_engine(IoMode::fake, make_memory_file(bytes), IoOptions{0, 0}), les::Error);
  if (have_uring()) {
    try {
      make_io_engine(IoMode::uring, make_memory_file(bytes, "memfile"), IoOptions{4, 0});
      FAIL() << "uring over a memory file";
    } catch (const les::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--io pread"), std::string::npos) << e.what();
    }
  }
}

TEST(StorageIoFaults, EmptyRequestCompletesAtOnce) {
  auto eng = make_io_engine(IoMode::fake, make_memory_file(random_bytes(4096, 1)), IoOptions{1, 0});
  IoRequest r;
  r.tag = 42;
  eng->submit(std::move(r));
  EXPECT_EQ(eng->pending(), 1u);  // completed but not yet handed out
  std::vector<IoCompletion> out;
  EXPECT_EQ(eng->poll(out), 1u);
  EXPECT_EQ(eng->pending(), 0u);
  EXPECT_EQ(out[0].tag, 42u);
  EXPECT_TRUE(out[0].ok());
  EXPECT_EQ(eng->poll(out), 0u);
}

// ---------------------------------------------------------------------------------------------
// Counters and stress

// ops and syscalls count exactly what was submitted; io_uring batches a request's SQEs into one
// submit call.
TEST(StorageIoCounters, OpsPerRequestExactlyAsSubmitted) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/counters.bin";
  const auto bytes = random_bytes(4 << 20, 23);
  write_file(path, bytes);
  auto file = open_direct(path);
  std::vector<IoMode> modes = real_modes();
  modes.push_back(IoMode::fake);
  for (IoMode mode : modes) {
    SCOPED_TRACE(io_mode_name(mode));
    auto eng = engine_or_skip(mode, file, IoOptions{16, 0});
    if (!eng) continue;
    std::vector<AlignedBuffer> bufs;
    for (int i = 0; i < 8; ++i) bufs.emplace_back(64 * 1024);
    IoRequest r;
    r.tag = 1;
    for (int i = 0; i < 8; ++i) r.ops.push_back(IoOp{uint64_t(i) * 256 * 1024, 64 * 1024, bufs[size_t(i)].data()});
    eng->submit(std::move(r));
    auto done = drain(*eng, 1);
    ASSERT_TRUE(done[0].ok()) << done[0].error;
    EXPECT_EQ(done[0].ops, 8u);
    EXPECT_EQ(done[0].bytes, 8u * 64 * 1024);
    IoCounters k = eng->counters();
    EXPECT_EQ(k.requests, 1u);
    EXPECT_EQ(k.ops, 8u);
    EXPECT_EQ(k.syscalls, 8u + k.retries);
    EXPECT_EQ(k.bytes, 8u * 64 * 1024);
    if (mode == IoMode::uring && k.retries == 0) {
      EXPECT_EQ(k.submit_calls, 1u);
    }
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(std::memcmp(bufs[size_t(i)].data(), bytes.data() + size_t(i) * 256 * 1024, 64 * 1024), 0);
    }
    // 20 more one-op requests.
    std::vector<AlignedBuffer> small;
    for (int i = 0; i < 20; ++i) small.emplace_back(4096);
    for (uint64_t t = 0; t < 20; ++t) eng->submit(one_op(100 + t, IoPriority::prefetch, small[t].data(), t * 65536, 4096));
    drain(*eng, 20);
    k = eng->counters();
    EXPECT_EQ(k.requests, 21u);
    EXPECT_EQ(k.ops, 28u);
    EXPECT_EQ(k.syscalls, 28u + k.retries);
    EXPECT_GE(k.max_in_flight, 1u);
    EXPECT_LE(k.max_in_flight, 16u);
    EXPECT_GT(k.busy_us, 0u);
    // A batch of 8 one-op requests: io_uring sends all 8 SQEs with one submit call.
    const IoCounters before = eng->counters();
    std::vector<IoRequest> batch;
    for (uint64_t t = 0; t < 8; ++t) batch.push_back(one_op(200 + t, IoPriority::prefetch, bufs[t].data(), t * 131072, 65536));
    eng->submit_batch(std::move(batch));
    drain(*eng, 8);
    k = eng->counters();
    EXPECT_EQ(k.ops - before.ops, 8u);
    if (mode == IoMode::uring && k.retries == before.retries) {
      EXPECT_EQ(k.submit_calls - before.submit_calls, 1u);
    }
    for (uint64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(std::memcmp(bufs[t].data(), bytes.data() + t * 131072, 65536), 0);
    }
    // A batch with a duplicate tag is refused as a whole.
    std::vector<IoRequest> dup;
    dup.push_back(one_op(300, IoPriority::demand, small[0].data(), 0, 4096));
    dup.push_back(one_op(300, IoPriority::demand, small[1].data(), 4096, 4096));
    EXPECT_THROW(eng->submit_batch(std::move(dup)), les::Error);
    EXPECT_EQ(eng->pending(), 0u);
  }
}

// Queue depth 1 and many requests of mixed priority with cancels and promotes interleaved: all
// that are not cancelled complete, on every backend.
TEST(StorageIoStress, NoDeadlockAtQueueDepthOne) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/stress.bin";
  const auto bytes = random_bytes(2 << 20, 29);
  write_file(path, bytes);
  auto file = open_direct(path);
  std::vector<IoMode> modes = real_modes();
  modes.push_back(IoMode::fake);
  for (IoMode mode : modes) {
    for (int qd : {1, 3}) {
      SCOPED_TRACE(std::string(io_mode_name(mode)) + " qd " + std::to_string(qd));
      IoOptions o{qd, 0};
      o.fake.eintr_every = 5;
      auto eng = engine_or_skip(mode, file, o);
      if (!eng) continue;
      const int n = 400;
      std::vector<AlignedBuffer> bufs;
      for (int i = 0; i < n; ++i) bufs.emplace_back(8192);
      std::mt19937_64 rng(qd);
      size_t cancelled = 0;
      std::vector<IoCompletion> done;
      for (int i = 0; i < n; ++i) {
        const uint64_t off = (rng() % ((2 << 20) / 4096 - 2)) * 4096;
        eng->submit(one_op(uint64_t(i), (rng() & 1) ? IoPriority::demand : IoPriority::prefetch,
                           bufs[size_t(i)].data(), off, 8192));
        if (i >= 3 && rng() % 5 == 0 && eng->cancel(uint64_t(i - 3))) ++cancelled;
        if (i >= 2 && rng() % 4 == 0) eng->promote(uint64_t(i - 2));
        if (rng() % 8 == 0) eng->poll(done);
      }
      const size_t want = n - cancelled;
      const auto deadline = std::chrono::steady_clock::now() + 60s;
      while (done.size() < want && std::chrono::steady_clock::now() < deadline) eng->wait(done, 100ms);
      ASSERT_EQ(done.size(), want);
      EXPECT_EQ(eng->pending(), 0u);
      for (const auto& c : done) ASSERT_TRUE(c.ok()) << c.error;
      const IoCounters k = eng->counters();
      EXPECT_EQ(k.cancelled, cancelled);
      EXPECT_EQ(k.requests, want);
      EXPECT_LE(k.max_in_flight, static_cast<uint32_t>(qd));
    }
  }
}

// Destroying an engine with queued requests and ops in flight neither hangs nor leaks.
TEST(StorageIoStress, DestroyWithWorkQueued) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/destroy.bin";
  write_file(path, random_bytes(1 << 20, 31));
  auto file = open_direct(path);
  std::vector<IoMode> modes = real_modes();
  modes.push_back(IoMode::fake);
  for (IoMode mode : modes) {
    SCOPED_TRACE(io_mode_name(mode));
    std::vector<AlignedBuffer> bufs;
    for (int i = 0; i < 64; ++i) bufs.emplace_back(16384);
    auto eng = engine_or_skip(mode, file, IoOptions{2, 0});
    if (!eng) continue;
    for (uint64_t t = 0; t < 64; ++t) eng->submit(one_op(t, IoPriority::prefetch, bufs[t].data(), (t % 60) * 16384, 16384));
    eng.reset();  // bufs outlive the engine
  }
}

// io_uring reaps completions either on the caller's thread (inside poll/wait; the default) or on a
// completion thread. Both: every read lands with the file's bytes under random cancels,
// promotions and polls; reads submitted by one thread complete for another that waits (the
// server runs each request on its own thread); destruction with work queued neither hangs nor
// leaks (ASan/TSan builds run this too).
TEST(StorageIoUring, BothWaysOfReapingCompletions) {
  if (!have_uring()) LES_SKIP_PLATFORM("io_uring unavailable (kernel or seccomp)");
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/reap.bin";
  const auto bytes = random_bytes(2 << 20, 37);
  write_file(path, bytes);
  auto file = open_direct(path);
  for (bool thread : {false, true}) {
    SCOPED_TRACE(thread ? "completion thread" : "caller's thread");
    IoOptions o{3, 0};
    o.uring_completion_thread = thread;
    o.prefetch_bytes = 16384;
    {
      auto eng = engine_or_skip(IoMode::uring, file, o);
      ASSERT_TRUE(eng);
      const int n = 300;
      std::vector<AlignedBuffer> bufs;
      std::vector<uint64_t> offs;
      for (int i = 0; i < n; ++i) bufs.emplace_back(8192);
      std::mt19937_64 rng(thread ? 2 : 1);
      std::vector<uint8_t> cancelled(n, 0);
      std::vector<IoCompletion> done;
      for (int i = 0; i < n; ++i) {
        offs.push_back((rng() % ((2 << 20) / 4096 - 2)) * 4096);
        const IoPriority p = rng() % 3 == 0 ? IoPriority::demand : rng() & 1 ? IoPriority::prefetch : IoPriority::speculative;
        eng->submit(one_op(uint64_t(i), p, bufs[size_t(i)].data(), offs.back(), 8192));
        if (i >= 3 && rng() % 5 == 0 && eng->cancel(uint64_t(i - 3))) cancelled[size_t(i - 3)] = 1;
        if (i >= 2 && rng() % 4 == 0) eng->promote(uint64_t(i - 2));
        if (rng() % 3 == 0) eng->poll(done);
      }
      size_t want = 0;
      for (uint8_t c : cancelled) want += c == 0;
      const auto deadline = std::chrono::steady_clock::now() + 60s;
      while (done.size() < want && std::chrono::steady_clock::now() < deadline) eng->wait(done, 100ms);
      ASSERT_EQ(done.size(), want);
      EXPECT_EQ(eng->pending(), 0u);
      for (const auto& c : done) {
        ASSERT_TRUE(c.ok()) << c.error;
        ASSERT_EQ(std::memcmp(bufs[c.tag].data(), bytes.data() + offs[c.tag], 8192), 0) << "request " << c.tag;
      }
    }
    {
      // Submitted on another thread, which then sleeps until the reads were collected here.
      auto eng = engine_or_skip(IoMode::uring, file, o);
      std::vector<AlignedBuffer> bufs;
      for (int i = 0; i < 16; ++i) bufs.emplace_back(65536);
      std::mutex mu;
      std::condition_variable cv;
      bool collected = false;
      std::thread submitter([&] {
        for (uint64_t t = 0; t < 16; ++t) eng->submit(one_op(t, IoPriority::prefetch, bufs[t].data(), t * 65536, 65536));
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return collected; });
      });
      std::vector<IoCompletion> done;
      const auto deadline = std::chrono::steady_clock::now() + 30s;
      while (done.size() < 16 && std::chrono::steady_clock::now() < deadline) {
        if (eng->pending() == 0) std::this_thread::sleep_for(1ms);  // not all submitted yet
        eng->wait(done, 100ms);
      }
      {
        std::lock_guard<std::mutex> lk(mu);
        collected = true;
      }
      cv.notify_all();
      submitter.join();
      ASSERT_EQ(done.size(), 16u);
      for (const auto& c : done) {
        ASSERT_TRUE(c.ok()) << c.error;
        EXPECT_EQ(std::memcmp(bufs[c.tag].data(), bytes.data() + c.tag * 65536, 65536), 0);
      }
    }
    {
      std::vector<AlignedBuffer> bufs;
      for (int i = 0; i < 64; ++i) bufs.emplace_back(16384);
      auto eng = engine_or_skip(IoMode::uring, file, o);
      for (uint64_t t = 0; t < 64; ++t) eng->submit(one_op(t, IoPriority::prefetch, bufs[t].data(), (t % 60) * 16384, 16384));
      eng.reset();  // bufs outlive the engine
    }
  }
}
