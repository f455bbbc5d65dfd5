// Fake backend for tests: reads from any ReadFile (normally an in-memory one) through the same
// exact-read logic as the real backends, with injected per-op latency, short reads, EINTR and
// EIO, and an optional log of the order in which ops started.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "les/storage/io_internal.h"

namespace les::storage::detail {

namespace {

class FakeEngine final : public WorkerPoolEngine {
 public:
  FakeEngine(std::shared_ptr<ReadFile> file, const IoOptions& o)
      : WorkerPoolEngine(IoMode::fake, std::move(file), o), cfg_(o.fake) {
    start();
  }
  ~FakeEngine() override { stop(); }

 protected:
  void on_op_started_locked(const Task& t) override {
    if (cfg_.log) cfg_.log->add(FakeOpRecord{t.tag, t.op.file_offset, t.op.length, t.priority});
  }

  OpResult run_op(int /*worker*/, const Task& t) override {
    if (cfg_.gate) cfg_.gate->pass();
    if (cfg_.op_mbs > 0 || cfg_.device_mbs > 0) {
      model_device_time(t.op.length);
    } else if (cfg_.latency.count() > 0) {
      std::this_thread::sleep_for(cfg_.latency);
    }
    const bool fail_op = cfg_.eio_after_ops >= 0 && t.seq >= static_cast<uint64_t>(cfg_.eio_after_ops);
    const ReadFile& f = *file_;
    return read_fully(f, t.op, [&](void* dst, size_t n, uint64_t off) -> int64_t {
      const uint64_t call = calls_.fetch_add(1, std::memory_order_relaxed) + 1;
      if (cfg_.eintr_every > 0 && call % static_cast<uint64_t>(cfg_.eintr_every) == 0) return -EINTR;
      if (fail_op) return -EIO;
      if (cfg_.max_read > 0) n = static_cast<size_t>(std::min<uint64_t>(n, cfg_.max_read));
      for (uint64_t bad : cfg_.eio_offsets) {
        if (bad >= off && bad < off + n) return -EIO;
      }
      return f.read_at(dst, n, off);
    });
  }

 private:
  using Clock = std::chrono::steady_clock;
  // Sleeps for the op's time under the device model (FakeIoConfig::op_mbs, device_mbs).
  void model_device_time(uint64_t bytes) {
    const Clock::time_point now = Clock::now();
    auto span = [&](double mbs) {
      return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(static_cast<double>(bytes) / (mbs * 1e6)));
    };
    Clock::time_point end = now + cfg_.latency;
    if (cfg_.op_mbs > 0) end += span(cfg_.op_mbs);
    if (cfg_.device_mbs > 0) {
      std::lock_guard<std::mutex> lk(device_mu_);
      const Clock::time_point start = std::max(now, device_free_);
      device_free_ = start + span(cfg_.device_mbs);
      end = std::max(end, device_free_);
    }
    std::this_thread::sleep_until(end);
  }

  const FakeIoConfig cfg_;
  std::mutex device_mu_;
  Clock::time_point device_free_{};
  std::atomic<uint64_t> calls_{0};
};

}  // namespace

std::unique_ptr<IoEngine> make_fake_engine(std::shared_ptr<ReadFile> file, const IoOptions& o) {
  return std::make_unique<FakeEngine>(std::move(file), o);
}

}  // namespace les::storage::detail
