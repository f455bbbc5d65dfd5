// io_uring backend: one SQE per op (IORING_OP_READ into the caller's buffer, O_DIRECT when the
// file is direct), SQEs prepared under the engine lock and submitted in batches with one
// io_uring_submit; a completion thread reaps CQEs, retries short reads/EINTR/EAGAIN with a new
// SQE for the remainder, and starts queued ops as slots free up.
//
// Completions are reaped in one of two ways (IoOptions::uring_completion_thread):
// - on the caller's thread (default): poll() and wait() reap the CQ and start the ops queued
//   behind the completed ones. The ring is set up with COOP_TASKRUN and TASKRUN_FLAG where the
//   kernel has them: a read's completion is task work of the thread that submitted it, run when
//   that thread next enters the kernel (a poll() that finds the TASKRUN flag set, or a wait()),
//   never by interrupting its computation. No thread wakes per read.
// - on a completion thread that sleeps in io_uring_wait_cqe and wakes for each completion.
// Threads: the SQ is touched only under mu_ (by submit()/promote()/poll()/wait() on the caller's
// thread and by the completion thread); the CQ by one consumer at a time (cq_mu_, or the
// completion thread alone).
#include <algorithm>
#include <cstddef>
#include <utility>

#include "les/storage/io_internal.h"
#include "les/util/error.h"

#ifdef LES_HAVE_URING
#include <liburing.h>

#include <cstring>
#endif

namespace les::storage::detail {

#ifdef LES_HAVE_URING

namespace {

constexpr uint64_t kWakeTag = 0;  // user_data of the NOP that wakes the completion thread
constexpr uint64_t kMaxSqeBytes = 1ull << 30;

class UringEngine final : public QueuedIoEngine {
 public:
  UringEngine(std::shared_ptr<ReadFile> file, const IoOptions& o)
      : QueuedIoEngine(IoMode::uring, std::move(file), o) {
    unsigned entries = 1;
    while (entries < static_cast<unsigned>(o.queue_depth) + 1) entries <<= 1;
    int rc = -EINVAL;
    if (!o.uring_completion_thread) {
      // Kernels before 5.19 refuse these flags: they get the completion thread.
      rc = io_uring_queue_init(entries, &ring_, IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
      if (rc == 0 && !(ring_.features & IORING_FEAT_EXT_ARG)) {
        io_uring_queue_exit(&ring_);  // a timed wait would need a timeout SQE: use the thread
        rc = -EINVAL;
      } else if (rc == 0) {
        inline_ = true;
      }
    }
    if (rc < 0) rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc < 0) {
      throw Error(strfmt("%s: io_uring is not available (io_uring_queue_init: %s; old kernel, "
                         "io_uring disabled, or blocked by seccomp); use --io pread",
                         file_->path().c_str(), std::strerror(-rc)));
    }
    if (io_uring_probe* probe = io_uring_get_probe_ring(&ring_)) {
      const bool has_read = io_uring_opcode_supported(probe, IORING_OP_READ);
      io_uring_free_probe(probe);
      if (!has_read) {
        io_uring_queue_exit(&ring_);
        throw Error(strfmt("%s: this kernel's io_uring has no IORING_OP_READ (needs Linux 5.6+); "
                           "use --io pread",
                           file_->path().c_str()));
      }
    }
    fd_ = file_->fd();
    if (io_uring_register_files(&ring_, &fd_, 1) == 0) fixed_ = true;
    slots_.resize(static_cast<size_t>(o.queue_depth));
    free_.reserve(slots_.size());
    for (size_t i = slots_.size(); i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
    if (!inline_) reaper_ = std::thread([this] { reap(); });
  }

  const char* completions_reaped_by() const override {
    return inline_ ? "the caller's thread" : "a completion thread";
  }

  size_t poll(std::vector<IoCompletion>& out) override {
    if (inline_) reap_inline(nullptr);
    return QueuedIoEngine::poll(out);
  }

  size_t wait(std::vector<IoCompletion>& out, std::chrono::microseconds timeout) override {
    if (!inline_) return QueuedIoEngine::wait(out, timeout);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      reap_inline(nullptr);
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (done_or_idle_locked()) break;
      }
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) break;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      __kernel_timespec ts{static_cast<long long>(ns / 1000000000), static_cast<long long>(ns % 1000000000)};
      reap_inline(&ts);
    }
    return QueuedIoEngine::poll(out);
  }

  uint64_t register_buffers(const std::vector<std::pair<uint8_t*, size_t>>& regions, std::string* why) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!fixed_bufs_.empty()) {
      if (why) *why = "buffers are already registered";
      return 0;
    }
    // One iovec per GiB at most (the kernel's limit per registered buffer).
    std::vector<iovec> iov;
    std::vector<FixedBuf> bufs;
    for (const auto& [p, n] : regions) {
      for (size_t at = 0; at < n; at += static_cast<size_t>(kMaxSqeBytes)) {
        const size_t len = std::min<size_t>(n - at, static_cast<size_t>(kMaxSqeBytes));
        iov.push_back(iovec{p + at, len});
        bufs.push_back(FixedBuf{p + at, p + at + len, static_cast<int>(bufs.size())});
      }
    }
    if (iov.empty()) return 0;
    const int rc = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (rc < 0) {
      if (why) {
        *why = strfmt("io_uring_register_buffers: %s%s", std::strerror(-rc),
                      rc == -ENOMEM ? " (the locked-memory limit, ulimit -l, is below the expert cache)" : "");
      }
      return 0;
    }
    std::sort(bufs.begin(), bufs.end(), [](const FixedBuf& a, const FixedBuf& b) { return a.begin < b.begin; });
    fixed_bufs_ = std::move(bufs);
    uint64_t total = 0;
    for (const iovec& v : iov) total += v.iov_len;
    return total;
  }

  ~UringEngine() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      fail_queued_locked(ECANCELED, file_->path() + ": I/O engine shut down", false);
    }
    if (inline_) {
      // The ops in the kernel still write into the caller's buffers: wait for them.
      for (;;) {
        {
          std::lock_guard<std::mutex> lk(mu_);
          if (in_flight_ == 0) break;
        }
        __kernel_timespec ts{0, 100000000};
        reap_inline(&ts);
      }
    } else {
      std::lock_guard<std::mutex> lk(mu_);
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      LES_ASSERT(sqe != nullptr);
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kWakeTag);
      int rc;
      do rc = io_uring_submit(&ring_);
      while (rc == -EINTR || rc == -EAGAIN);
    }
    if (reaper_.joinable()) reaper_.join();
    io_uring_queue_exit(&ring_);
  }

 protected:
  void kick_locked() override {
    if (!broken_.empty()) {
      fail_queued_locked(EIO, broken_, true);
      return;
    }
    OpRef ref;
    while (!free_.empty() && take_op_locked(ref)) {
      const uint32_t s = free_.back();
      free_.pop_back();
      slots_[s].ref = ref;
      slots_[s].progress = ReadProgress(file_.get(), ref.op());
      if (ref.op().length == 0) {  // nothing to read
        finish_slot_locked(s);
        continue;
      }
      prep_locked(s);
    }
    submit_locked();
  }

 private:
  struct Slot {
    OpRef ref;
    ReadProgress progress;
    bool in_fixed = false;  // the SQE in the kernel is a READ_FIXED
  };

  void prep_locked(uint32_t s) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    LES_ASSERT(sqe != nullptr);  // entries > queue_depth and SQEs are consumed by each submit
    const ReadProgress& p = slots_[s].progress;
    // Reads larger than 1 GiB go in pieces (the kernel caps one read anyway); the remainder is
    // a short read to the progress logic.
    const uint64_t n = std::min<uint64_t>(p.next_length(), kMaxSqeBytes);
    const int buf = fixed_buffer(static_cast<uint8_t*>(p.next_dst()), n);
    if (buf >= 0) {
      io_uring_prep_read_fixed(sqe, fixed_ ? 0 : fd_, p.next_dst(), static_cast<unsigned>(n), p.next_offset(), buf);
    } else {
      io_uring_prep_read(sqe, fixed_ ? 0 : fd_, p.next_dst(), static_cast<unsigned>(n), p.next_offset());
    }
    if (fixed_) sqe->flags |= IOSQE_FIXED_FILE;
    slots_[s].in_fixed = buf >= 0;
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(s) + 1);
    unsubmitted_.push_back(s);
  }

  void submit_locked() {
    int tries = 0;
    while (io_uring_sq_ready(&ring_) > 0) {
      const int rc = io_uring_submit(&ring_);
      if (rc >= 0) {
        ++counters_.submit_calls;
        const size_t consumed = std::min(static_cast<size_t>(rc), unsubmitted_.size());
        unsubmitted_.erase(unsubmitted_.begin(), unsubmitted_.begin() + static_cast<std::ptrdiff_t>(consumed));
        continue;
      }
      if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && ++tries < 1000) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        continue;
      }
      break_locked(strfmt("%s: io_uring_submit failed: %s", file_->path().c_str(), std::strerror(-rc)), -rc);
      return;
    }
    unsubmitted_.clear();
  }

  // The ring cannot take SQEs any more: fail the prepared ones (the kernel never saw them) and
  // everything queued; ops already in the kernel still complete normally.
  void break_locked(const std::string& msg, int err) {
    broken_ = msg;
    std::vector<uint32_t> lost;
    lost.swap(unsubmitted_);
    for (uint32_t s : lost) {
      OpResult& r = slots_[s].progress.result();
      r.err = err;
      r.error = msg;
      r.bytes = 0;
      finish_slot_locked(s);
    }
    fail_queued_locked(err, msg, true);
  }

  void finish_slot_locked(uint32_t s) {
    Slot& slot = slots_[s];
    finish_op_locked(slot.ref, std::move(slot.progress.result()));
    slot = Slot{};
    free_.push_back(s);
  }

  void handle_locked(const io_uring_cqe* cqe) {
    const uint64_t data = io_uring_cqe_get_data64(cqe);
    if (data == kWakeTag) return;
    const uint32_t s = static_cast<uint32_t>(data - 1);
    LES_ASSERT(s < slots_.size());
    // Counted on completion, like syscalls, so fixed_reads <= syscalls at every moment.
    if (slots_[s].in_fixed) ++slots_[s].progress.result().fixed_reads;
    if (slots_[s].progress.on_result(cqe->res)) {
      prep_locked(s);  // remainder or retry, submitted with the next batch
    } else {
      finish_slot_locked(s);
    }
  }

  // Inline reaping: the CQEs there are (with ts, waiting up to ts for one), handled, and the ops
  // they made room for started. Without ts it enters the kernel only when the kernel flagged
  // completions not yet posted (IORING_SQ_TASKRUN). One consumer at a time: a poll() finding
  // another thread reaping returns at once.
  void reap_inline(__kernel_timespec* ts) {
    std::unique_lock<std::mutex> cq(cq_mu_, std::defer_lock);
    if (ts) {
      cq.lock();
    } else if (!cq.try_lock()) {
      return;
    }
    io_uring_cqe* cqe = nullptr;
    if (ts) {
      const int rc = io_uring_wait_cqe_timeout(&ring_, &cqe, ts);
      if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN) {
        std::lock_guard<std::mutex> lk(mu_);
        if (broken_.empty()) break_locked(strfmt("%s: io_uring wait failed: %s", file_->path().c_str(), std::strerror(-rc)), -rc);
        return;
      }
    } else {
      io_uring_peek_cqe(&ring_, &cqe);  // runs pending completion work first where flagged
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (handle_cqes_locked() > 0 && !stop_) kick_locked();
  }

  // Handles every CQE in the ring and consumes them; returns how many there were.
  unsigned handle_cqes_locked() {
    io_uring_cqe* cqe = nullptr;
    unsigned head;
    unsigned n = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      handle_locked(cqe);
      ++n;
    }
    io_uring_cq_advance(&ring_, n);
    return n;
  }

  void reap() {
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);  // CQ is this thread's alone
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -ETIME) {
        {
          std::lock_guard<std::mutex> lk(mu_);
          if (stop_ && in_flight_ == 0) return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));  // do not spin on a broken ring
        continue;
      }
      std::lock_guard<std::mutex> lk(mu_);
      handle_cqes_locked();
      kick_locked();
      if (stop_ && in_flight_ == 0) return;
    }
  }

  struct FixedBuf {
    uint8_t* begin;
    uint8_t* end;
    int index;  // in the registration order
  };
  // The registered buffer holding [dst, dst + n), or -1.
  int fixed_buffer(uint8_t* dst, uint64_t n) const {
    if (fixed_bufs_.empty()) return -1;
    auto it = std::upper_bound(fixed_bufs_.begin(), fixed_bufs_.end(), dst,
                               [](uint8_t* d, const FixedBuf& b) { return d < b.begin; });
    if (it == fixed_bufs_.begin()) return -1;
    --it;
    return dst >= it->begin && dst + n <= it->end ? it->index : -1;
  }

  io_uring ring_{};
  std::vector<FixedBuf> fixed_bufs_;  // sorted by begin
  int fd_ = -1;
  bool fixed_ = false;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> unsubmitted_;  // slots prepared since the last successful submit
  std::string broken_;
  bool stop_ = false;
  bool inline_ = false;   // completions reaped on the caller's thread (no reaper_)
  std::mutex cq_mu_;      // inline: one CQ consumer at a time (taken before mu_)
  std::thread reaper_;
};

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(std::shared_ptr<ReadFile> file, const IoOptions& o) {
  if (file->fd() < 0) {
    throw Error(strfmt("%s: the io_uring backend needs a real file (use --io pread or fake)",
                       file->path().c_str()));
  }
  return std::make_unique<UringEngine>(std::move(file), o);
}

bool uring_usable() {
  // Once per process: a ring of one entry that supports IORING_OP_READ.
  static const bool usable = [] {
    io_uring ring;
    if (io_uring_queue_init(1, &ring, 0) < 0) return false;
    bool has_read = false;
    if (io_uring_probe* probe = io_uring_get_probe_ring(&ring)) {
      has_read = io_uring_opcode_supported(probe, IORING_OP_READ);
      io_uring_free_probe(probe);
    }
    io_uring_queue_exit(&ring);
    return has_read;
  }();
  return usable;
}

#else  // !LES_HAVE_URING

bool uring_usable() { return false; }

std::unique_ptr<IoEngine> make_uring_engine(std::shared_ptr<ReadFile> file, const IoOptions&) {
  throw Error(strfmt("%s: this build has no io_uring support (liburing was not found at build "
                     "time); use --io pread",
                     file->path().c_str()));
}

#endif

}  // namespace les::storage::detail
