// les verify: a packed file's structure and every expert's checksum.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/pack/pack.h"
#include "les/pack/pack_format.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les::pack {

namespace {

using ull = unsigned long long;

constexpr uint64_t kChunkBytes = uint64_t(64) << 20;  // rows read per pread, at least one row

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw Error(strfmt("%s: cannot open: %s", path.c_str(), std::strerror(errno)));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly n bytes at off (short reads and EINTR retried); EOF or an error throws.
void read_exact(int fd, uint8_t* dst, uint64_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, dst, static_cast<size_t>(std::min<uint64_t>(n, uint64_t(1) << 30)),
                              static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      throw Error(strfmt("%s: reading %llu bytes at offset %llu failed: %s", path.c_str(), ull(n), ull(off),
                         r == 0 ? "unexpected end of file (truncated?)" : std::strerror(errno)));
    }
    dst += r;
    off += static_cast<uint64_t>(r);
    n -= static_cast<uint64_t>(r);
  }
}

}  // namespace

VerifySummary verify_packed(const std::string& path, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const gguf::File f = gguf::read_file(path);
  if (!is_packed(f)) {
    throw Error(strfmt("%s: not a packed model (no %s key); `les pack IN OUT` writes one", path.c_str(), kKeyVersion));
  }
  const PackInfo info = read_pack_info(f, path);
  VerifySummary sum;
  uint64_t total = 0;
  for (const auto& pl : info.layers) total += pl.stride * static_cast<uint64_t>(pl.n_expert);

  Fd fd(path);
  std::vector<uint8_t> buf;
  for (const auto& pl : info.layers) {
    ++sum.layers;
    sum.experts += pl.n_expert;
    const int64_t rows_per_chunk = static_cast<int64_t>(std::max<uint64_t>(1, kChunkBytes / pl.stride));
    for (int64_t e0 = 0; e0 < pl.n_expert; e0 += rows_per_chunk) {
      const int64_t e1 = std::min(pl.n_expert, e0 + rows_per_chunk);
      const uint64_t off = pl.file_offset + static_cast<uint64_t>(e0) * pl.stride;
      const uint64_t n = static_cast<uint64_t>(e1 - e0) * pl.stride;
      buf.resize(static_cast<size_t>(n));
      read_exact(fd.get(), buf.data(), n, off, path);
      ::posix_fadvise(fd.get(), static_cast<off_t>(off), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
      for (int64_t e = e0; e < e1; ++e) {
        const uint8_t* row = buf.data() + static_cast<uint64_t>(e - e0) * pl.stride;
        const uint64_t want = pl.checksums[static_cast<size_t>(e)];
        const uint64_t got = hash64(row, static_cast<size_t>(pl.data_bytes));
        if (got != want) {
          sum.problems.push_back(strfmt("layer %d, expert %lld: checksum mismatch (recorded %s, computed %s): its "
                                        "bytes at file offset %llu..%llu changed since les pack wrote them",
                                        pl.layer, static_cast<long long>(e), hex64(want).c_str(), hex64(got).c_str(),
                                        ull(pl.file_offset + static_cast<uint64_t>(e) * pl.stride),
                                        ull(pl.file_offset + static_cast<uint64_t>(e) * pl.stride + pl.data_bytes)));
        }
        const uint8_t* pad = row + pl.data_bytes;
        const uint64_t n_pad = pl.stride - pl.data_bytes;
        if (n_pad > 0 && (pad[0] != 0 || std::memcmp(pad, pad + 1, static_cast<size_t>(n_pad - 1)) != 0)) {
          sum.problems.push_back(strfmt("layer %d, expert %lld: the %llu padding bytes after its data are not zero",
                                        pl.layer, static_cast<long long>(e), ull(n_pad)));
        }
      }
      sum.bytes += n;
      if (progress) progress(sum.bytes, total);
    }
  }
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace les::pack
