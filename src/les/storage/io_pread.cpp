// pread thread pool: N threads, each reads one op at a time with pread(2) straight into the
// caller's buffer (O_DIRECT when the file is direct). Portable; no kernel queue.
#include <utility>

#include "les/storage/io_internal.h"

namespace les::storage::detail {

namespace {

class PreadEngine final : public WorkerPoolEngine {
 public:
  PreadEngine(std::shared_ptr<ReadFile> file, const IoOptions& o)
      : WorkerPoolEngine(IoMode::pread, std::move(file), o) {
    start();
  }
  ~PreadEngine() override { stop(); }

 protected:
  OpResult run_op(int /*worker*/, const Task& t) override {
    const ReadFile& f = *file_;
    return read_fully(f, t.op, [&f](void* dst, size_t n, uint64_t off) { return f.read_at(dst, n, off); });
  }
};

}  // namespace

std::unique_ptr<IoEngine> make_pread_engine(std::shared_ptr<ReadFile> file, const IoOptions& o) {
  return std::make_unique<PreadEngine>(std::move(file), o);
}

}  // namespace les::storage::detail
