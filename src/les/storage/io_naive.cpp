// The baseline most engines use: buffered pread(2) into a per-thread staging buffer, memcpy into
// the destination, then posix_fadvise(DONTNEED) on the range so the page cache does not grow
// beyond the memory budget (an honest comparison with direct I/O). A direct file is re-opened
// buffered.
#include <algorithm>
#include <cstring>
#include <utility>

#include "les/storage/io_internal.h"

namespace les::storage::detail {

namespace {

constexpr uint64_t kMaxStaging = 16ull << 20;  // larger ops are read in chunks of this size

class NaiveEngine final : public WorkerPoolEngine {
 public:
  NaiveEngine(std::shared_ptr<ReadFile> file, const IoOptions& o)
      : WorkerPoolEngine(IoMode::naive, std::move(file), o) {
    staging_.resize(static_cast<size_t>(n_threads()));
    start();
  }
  ~NaiveEngine() override { stop(); }

 protected:
  OpResult run_op(int worker, const Task& t) override {
    const ReadFile& f = *file_;
    std::vector<uint8_t>& buf = staging_[static_cast<size_t>(worker)];  // only this worker's
    OpResult total;
    uint64_t done = 0;
    while (done < t.op.length) {
      const uint64_t n = std::min(t.op.length - done, kMaxStaging);
      if (buf.size() < n) buf.resize(static_cast<size_t>(n));
      const IoOp chunk{t.op.file_offset + done, n, buf.data()};
      OpResult r = read_fully(f, chunk, [&f](void* dst, size_t len, uint64_t off) { return f.read_at(dst, len, off); });
      total.syscalls += r.syscalls;
      total.retries += r.retries;
      total.short_reads += r.short_reads;
      if (r.err != 0) {
        total.err = r.err;
        // Name the whole op, not the chunk.
        total.error = std::move(r.error);
        total.bytes = 0;
        return total;
      }
      std::memcpy(static_cast<uint8_t*>(t.op.dst) + done, buf.data(), static_cast<size_t>(r.bytes));
      done += r.bytes;
      total.bytes += r.bytes;
      if (r.bytes < n) break;  // reached the end of the file (tail op)
    }
    f.drop_cache(t.op.file_offset, t.op.length);
    return total;
  }

 private:
  std::vector<std::vector<uint8_t>> staging_;
};

}  // namespace

std::unique_ptr<IoEngine> make_naive_engine(std::shared_ptr<ReadFile> file, const IoOptions& o) {
  if (file->direct()) file = open_buffered(file->path());
  return std::make_unique<NaiveEngine>(std::move(file), o);
}

}  // namespace les::storage::detail
