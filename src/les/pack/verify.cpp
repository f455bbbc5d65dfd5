// les verify: a packed file's structure and every expert's checksum; any file's tensors scanned
// for non-finite values.
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
#include "les/quant/finite.h"
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

// Reads tensor t (not a packed row tensor) in chunks of whole blocks and records its first
// non-finite value in sum.problems.
void scan_tensor(int fd, const gguf::File& f, const gguf::TensorInfo& t, const std::string& path,
                 std::vector<uint8_t>& buf, VerifySummary& sum) {
  const TypeInfo& ti = info(t.type);
  const int64_t blocks_per_chunk = static_cast<int64_t>(std::max<uint64_t>(1, kChunkBytes / ti.block_bytes));
  const int64_t n_blocks = t.n_elements() / ti.block_size;
  ++sum.tensors;
  for (int64_t b0 = 0; b0 < n_blocks; b0 += blocks_per_chunk) {
    const int64_t nb = std::min(blocks_per_chunk, n_blocks - b0);
    const uint64_t n = static_cast<uint64_t>(nb) * ti.block_bytes;
    const uint64_t off = f.data_offset + t.offset + static_cast<uint64_t>(b0) * ti.block_bytes;
    buf.resize(static_cast<size_t>(n));
    read_exact(fd, buf.data(), n, off, path);
    ::posix_fadvise(fd, static_cast<off_t>(off), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
    sum.bytes += n;
    if (auto nf = find_nonfinite(t.type, buf.data(), nb * ti.block_size)) {
      nf->block += b0;
      sum.problems.push_back(strfmt("tensor '%s' (%s): %s", t.name.c_str(), type_name(t.type),
                                    describe_nonfinite(t.type, *nf).c_str()));
      return;
    }
  }
}

// Scans every tensor that is not a packed row tensor.
void scan_tensors(int fd, const gguf::File& f, const std::string& path, VerifySummary& sum,
                  const ProgressFn& progress, uint64_t total) {
  std::vector<uint8_t> buf;
  for (const auto& t : f.tensors) {
    if (is_packed_tensor_name(t.name)) continue;
    scan_tensor(fd, f, t, path, buf, sum);
    if (progress) progress(sum.bytes, total);
  }
}

uint64_t unpacked_tensor_bytes(const gguf::File& f) {
  uint64_t n = 0;
  for (const auto& t : f.tensors) {
    if (!is_packed_tensor_name(t.name)) n += t.n_bytes;
  }
  return n;
}

}  // namespace

VerifySummary verify_weights(const std::string& path, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const gguf::File f = gguf::read_file(path);
  if (is_packed(f)) return verify_packed(path, progress);
  VerifySummary sum;
  Fd fd(path);
  scan_tensors(fd.get(), f, path, sum, progress, unpacked_tensor_bytes(f));
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

VerifySummary verify_packed(const std::string& path, const ProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const gguf::File f = gguf::read_file(path);
  if (!is_packed(f)) {
    throw Error(strfmt("%s: not a packed model (no %s key); `les pack IN OUT` writes one", path.c_str(), kKeyVersion));
  }
  const PackInfo info = read_pack_info(f, path);
  VerifySummary sum;
  uint64_t total = unpacked_tensor_bytes(f);
  for (const auto& pl : info.layers) total += pl.stride * static_cast<uint64_t>(pl.n_expert);

  Fd fd(path);
  scan_tensors(fd.get(), f, path, sum, progress, total);
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
        for (int part = 0; part < kParts; ++part) {
          const PackedPart& pp = pl.parts[part];
          const int64_t n_el = pp.ne[0] * pp.ne[1];
          if (const auto nf = find_nonfinite(pp.type, row + pp.offset, n_el)) {
            sum.problems.push_back(strfmt("layer %d, expert %lld: %s (%s, %s): %s", pl.layer,
                                          static_cast<long long>(e), part_name(part), pp.tensor.c_str(),
                                          type_name(pp.type), describe_nonfinite(pp.type, *nf).c_str()));
          }
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
