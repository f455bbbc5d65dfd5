// Random-read throughput of the storage backends: reads of a given size at random 4 KiB-aligned
// offsets of a file, with `qd` reads outstanding (closed loop: each completion submits the next),
// for each backend, size and queue depth. Reports MB/s and reads/s (median of repeats), mean
// latency and the engine's counters. The page cache is dropped for the whole file before every
// repeat (posix_fadvise DONTNEED), so buffered reads start cold too. "CPU s/GB" is the process's
// user+system CPU time per GB read (the naive mode's memcpy and page-cache work show up there).
//
//   bench_io --file PATH [--create-mb N] [--sizes 70K,884K,2.9M] [--qd 1,4,16]
//            [--modes uring,pread,naive] [--reps 5] [--mb-per-rep 128] [--max-s-per-rep 2]
//            [--threads N] [--seed S]
//
// --create-mb N writes N MiB of pseudo-random bytes to PATH first if it is missing or smaller.
// Read sizes are rounded up to 4 KiB (an expert packed for direct I/O is a 4 KiB-aligned extent).
// Not a test: numbers depend on the device, its other users and the kernel.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "les/storage/io.h"
#include "les/util/error.h"

using namespace les;
using namespace les::storage;

namespace {

struct Args {
  std::string file;
  uint64_t create_mb = 0;
  std::vector<uint64_t> sizes = {70 << 10, 884 << 10, static_cast<uint64_t>(2.9 * (1 << 20))};
  std::vector<int> qds = {1, 4, 16};
  std::vector<IoMode> modes = {IoMode::uring, IoMode::pread, IoMode::naive};
  int reps = 5;
  uint64_t mb_per_rep = 128;
  double max_s_per_rep = 2.0;
  int threads = 0;
  uint64_t seed = 1;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

uint64_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v <= 0) throw Error("bad size '" + s + "'");
  switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default: throw Error("bad size suffix in '" + s + "'");
  }
  return static_cast<uint64_t>(v + 0.5);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("missing value after " + k);
      return argv[++i];
    };
    if (k == "--file") a.file = val();
    else if (k == "--create-mb") a.create_mb = std::stoull(val());
    else if (k == "--sizes") { a.sizes.clear(); for (auto& s : split(val())) a.sizes.push_back(parse_size(s)); }
    else if (k == "--qd") { a.qds.clear(); for (auto& s : split(val())) a.qds.push_back(std::stoi(s)); }
    else if (k == "--modes") { a.modes.clear(); for (auto& s : split(val())) a.modes.push_back(parse_io_mode(s)); }
    else if (k == "--reps") a.reps = std::stoi(val());
    else if (k == "--mb-per-rep") a.mb_per_rep = std::stoull(val());
    else if (k == "--max-s-per-rep") a.max_s_per_rep = std::stod(val());
    else if (k == "--threads") a.threads = std::stoi(val());
    else if (k == "--seed") a.seed = std::stoull(val());
    else if (k == "-h" || k == "--help") {
      std::printf("usage: bench_io --file PATH [--create-mb N] [--sizes 70K,884K,2.9M] [--qd 1,4,16]\n"
                  "                [--modes uring,pread,naive] [--reps 5] [--mb-per-rep 128]\n"
                  "                [--max-s-per-rep 2] [--threads N] [--seed S]\n");
      std::exit(0);
    } else {
      throw Error("unknown option " + k);
    }
  }
  if (a.file.empty()) throw Error("--file PATH is required");
  if (a.reps < 1) throw Error("--reps must be >= 1");
  return a;
}

void create_file(const std::string& path, uint64_t mb) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(strfmt("%s: cannot create: %s", path.c_str(), std::strerror(errno)));
  std::vector<uint64_t> chunk((8u << 20) / 8);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint64_t done = 0; done < mb; done += 8) {
    for (auto& w : chunk) {  // xorshift64: incompressible, fast
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w = x;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(8, mb - done)) << 20;
    const char* p = reinterpret_cast<const char*>(chunk.data());
    for (size_t off = 0; off < n;) {
      const ssize_t w = ::write(fd, p + off, n - off);
      if (w < 0) {
        if (errno == EINTR) continue;
        ::close(fd);
        throw Error(strfmt("%s: write failed: %s", path.c_str(), std::strerror(errno)));
      }
      off += static_cast<size_t>(w);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw Error(strfmt("%s: fsync/close failed", path.c_str()));
}

void drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double cpu_seconds() {
  rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

struct RepResult {
  double seconds = 0;
  double cpu_seconds = 0;  // user + system time of the process (all threads)
  uint64_t reads = 0;
  uint64_t bytes = 0;
  double mean_latency_us = 0;
  IoCounters counters;
};

RepResult run_rep(IoMode mode, const std::shared_ptr<ReadFile>& file, uint64_t size, int qd,
                  const Args& a, std::mt19937_64& rng) {
  auto eng = make_io_engine(mode, file, IoOptions{qd, a.threads});
  std::vector<AlignedBuffer> bufs;
  for (int i = 0; i < qd; ++i) bufs.emplace_back(size);
  const uint64_t blocks = (file->size() - size) / kDirectIoAlign;
  const uint64_t target_reads =
      std::clamp<uint64_t>((a.mb_per_rep << 20) / size, static_cast<uint64_t>(4 * qd), 20000);
  uint64_t submitted = 0;
  auto submit = [&](size_t slot) {
    IoRequest r;
    r.tag = slot;
    r.priority = IoPriority::demand;
    r.ops.push_back(IoOp{(rng() % (blocks + 1)) * kDirectIoAlign, size, bufs[slot].data()});
    eng->submit(std::move(r));
    ++submitted;
  };
  RepResult res;
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(a.max_s_per_rep);
  for (int i = 0; i < qd; ++i) submit(static_cast<size_t>(i));
  std::vector<IoCompletion> done;
  double lat_sum = 0;
  bool stop = false;
  while (eng->pending() > 0) {
    done.clear();
    eng->wait(done, std::chrono::milliseconds(100));
    for (const auto& c : done) {
      if (!c.ok()) throw Error(c.error);
      ++res.reads;
      res.bytes += c.bytes;
      lat_sum += static_cast<double>(c.latency_us);
      if (!stop && (submitted >= target_reads || std::chrono::steady_clock::now() > deadline)) stop = true;
      if (!stop) submit(static_cast<size_t>(c.tag));
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.cpu_seconds = cpu_seconds() - cpu0;
  res.mean_latency_us = res.reads ? lat_sum / static_cast<double>(res.reads) : 0;
  res.counters = eng->counters();
  return res;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    if (a.create_mb > 0) {
      struct stat st {};
      if (::stat(a.file.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) < (a.create_mb << 20)) {
        std::fprintf(stderr, "creating %s (%llu MiB)...\n", a.file.c_str(), static_cast<unsigned long long>(a.create_mb));
        create_file(a.file, a.create_mb);
      }
    }
    auto direct = open_direct(a.file);
    std::printf("file %s: %.1f MiB, %s\n", a.file.c_str(), static_cast<double>(direct->size()) / (1 << 20),
                direct->direct() ? "O_DIRECT" : "O_DIRECT refused by the filesystem: buffered");
    std::printf("median of %d repeats; each repeat reads up to %llu MiB or %.1f s at random 4 KiB-aligned offsets\n\n",
                a.reps, static_cast<unsigned long long>(a.mb_per_rep), a.max_s_per_rep);
    std::printf("| mode  | size KiB | qd | MB/s   | reads/s | mean lat us | syscalls/read | submits/read | retries/read | busy %% | CPU s/GB |\n");
    std::printf("|-------|---------:|---:|-------:|--------:|------------:|--------------:|-------------:|-------------:|-------:|---------:|\n");
    std::mt19937_64 rng(a.seed);
    for (uint64_t size0 : a.sizes) {
      const uint64_t size = align_up(size0, kDirectIoAlign);
      if (size >= direct->size()) throw Error("read size larger than the file");
      for (int qd : a.qds) {
        for (IoMode mode : a.modes) {
          std::vector<double> mbs, rps, lat, sys, sub, busy, retry, cpu;
          bool skipped = false;
          for (int r = 0; r < a.reps; ++r) {
            drop_page_cache(a.file);
            RepResult res;
            try {
              res = run_rep(mode, direct, size, qd, a, rng);
            } catch (const Error& e) {
              if (mode != IoMode::uring) throw;
              std::fprintf(stderr, "uring skipped: %s\n", e.what());
              skipped = true;
              break;
            }
            mbs.push_back(static_cast<double>(res.bytes) / res.seconds / 1e6);
            rps.push_back(static_cast<double>(res.reads) / res.seconds);
            lat.push_back(res.mean_latency_us);
            sys.push_back(static_cast<double>(res.counters.syscalls) / static_cast<double>(res.reads));
            sub.push_back(static_cast<double>(res.counters.submit_calls) / static_cast<double>(res.reads));
            cpu.push_back(res.cpu_seconds / (static_cast<double>(res.bytes) / 1e9));
            retry.push_back(static_cast<double>(res.counters.retries) / static_cast<double>(res.reads));
            busy.push_back(100.0 * static_cast<double>(res.counters.busy_us) / (res.seconds * 1e6));
          }
          if (skipped) continue;
          std::printf("| %-5s | %8.0f | %2d | %6.0f | %7.0f | %11.0f | %13.2f | %12.2f | %12.2f | %6.0f | %8.2f |\n",
                      io_mode_name(mode), static_cast<double>(size) / 1024, qd, median(mbs), median(rps),
                      median(lat), median(sys), median(sub), median(retry), median(busy), median(cpu));
          std::fflush(stdout);
        }
      }
    }
    drop_page_cache(a.file);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_io: %s\n", e.what());
    return 1;
  }
}
