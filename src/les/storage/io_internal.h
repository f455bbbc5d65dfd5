// Shared machinery of the I/O backends (not part of the public interface): the priority queue
// and request bookkeeping every backend uses, the exact-read state machine (short reads, EINTR,
// EOF), and a worker-thread engine for the synchronous backends (pread, naive, fake).
#pragma once

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "les/storage/io.h"

namespace les::storage::detail {

using Clock = std::chrono::steady_clock;

// Outcome of one op.
struct OpResult {
  uint64_t bytes = 0;
  int err = 0;
  std::string error;
  uint32_t syscalls = 0;
  uint32_t retries = 0;
  uint32_t short_reads = 0;
  uint32_t fixed_reads = 0;  // completed READ_FIXED SQEs (uring)
};

// Progress of one op through repeated read calls. The caller issues a read of next_length()
// bytes at next_offset() into next_dst(), then passes the call's result (bytes or -errno) to
// on_result(), which says whether another read is needed. Rules: short reads continue from the
// last aligned position reached (direct files need aligned offsets); EINTR/EAGAIN retry;
// EOF at or past the file's size ends an op that covers the file's tail; EOF before that is a
// truncated-file error; any other errno is an error naming the path and offsets.
class ReadProgress {
 public:
  ReadProgress() = default;
  ReadProgress(const ReadFile* f, const IoOp& op) : f_(f), op_(op) {}

  uint64_t next_offset() const { return op_.file_offset + done_; }
  uint64_t next_length() const { return op_.length - done_; }
  void* next_dst() const { return static_cast<uint8_t*>(op_.dst) + done_; }
  // True when the read just retried is worth a short back-off (EAGAIN).
  bool backoff() const { return last_err_ == EAGAIN; }

  // Returns true if another read is needed; false when finished (result() is final).
  bool on_result(int64_t r);
  OpResult& result() { return res_; }
  const IoOp& op() const { return op_; }

 private:
  void fail(int err, uint64_t at);
  const ReadFile* f_ = nullptr;
  IoOp op_{};
  uint64_t done_ = 0;
  int consecutive_ = 0;  // retries without progress
  int last_err_ = 0;
  OpResult res_;
};

// Reads op completely with read(dst, n, offset) -> bytes or -errno (one call per invocation).
template <class ReadFn>
OpResult read_fully(const ReadFile& f, const IoOp& op, ReadFn&& read) {
  ReadProgress p(&f, op);
  if (op.length == 0) return p.result();
  for (;;) {
    const int64_t r = read(p.next_dst(), p.next_length(), p.next_offset());
    if (!p.on_result(r)) return std::move(p.result());
    if (p.backoff()) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// "path: read of N bytes at offset X failed at offset Y: <errno text>"
std::string read_error_message(const ReadFile& f, const IoOp& op, uint64_t at, int err);

// The priority queue, cancel/promote, completions and counters shared by all backends. Backends
// start ops with take_op_locked() and report them with finish_op_locked(), both under mu_; the
// base calls kick_locked() whenever an op may have become startable.
class QueuedIoEngine : public IoEngine {
 public:
  // Uses opts.queue_depth and opts.prefetch_bytes (0: no separate limit).
  QueuedIoEngine(IoMode mode, std::shared_ptr<ReadFile> file, const IoOptions& opts);

  void submit(IoRequest req) override;
  void submit_batch(std::vector<IoRequest> reqs) override;
  bool cancel(uint64_t tag) override;
  bool promote(uint64_t tag, IoPriority to = IoPriority::demand) override;
  size_t poll(std::vector<IoCompletion>& out) override;
  size_t wait(std::vector<IoCompletion>& out, std::chrono::microseconds timeout) override;
  size_t pending() const override;
  IoCounters counters() const override;
  IoMode mode() const override { return mode_; }
  int queue_depth() const override { return queue_depth_; }
  const ReadFile& file() const override { return *file_; }

 protected:
  struct Request {
    uint64_t tag = 0;
    IoPriority priority = IoPriority::demand;
    std::vector<IoOp> ops;
    size_t next = 0;      // first op not yet started
    size_t started = 0;
    size_t finished = 0;
    bool queued = false;  // in one of the queues (has unstarted ops)
    uint64_t bytes = 0;
    int err = 0;
    std::string error;
    Clock::time_point t_submit, t_start;
  };
  struct OpRef {
    Request* req = nullptr;
    size_t index = 0;
    uint64_t seq = 0;  // 0-based number of the op among all ops this engine started
    bool prefetch = false;  // started at prefetch or speculative priority (counts against prefetch_bytes)
    bool speculative = false;  // started at speculative priority
    const IoOp& op() const { return req->ops[index]; }
  };

  // Starts the next op in priority order if fewer than queue_depth are in flight (and, for a
  // prefetch op, if no prefetch op is in flight or its bytes stay within prefetch_bytes; for a
  // speculative op, only if no op at all is in flight).
  bool take_op_locked(OpRef& out);
  // Records the end of an op started by take_op_locked(); completes its request when it was the
  // request's last op. After an error the request's unstarted ops are dropped.
  void finish_op_locked(const OpRef& ref, OpResult&& res);
  // Fails every queued request's unstarted ops with (err, message) (backend broken / shutdown).
  // Requests with no op started are completed (or, if complete_unstarted is false, dropped
  // without a completion); the others complete when their ops in flight finish.
  void fail_queued_locked(int err, const std::string& message, bool complete_unstarted);
  // Called under mu_ after submit() and promote(): ops may be startable.
  virtual void kick_locked() = 0;
  // Under mu_: a completion is ready for poll()/wait(), or nothing is pending.
  bool done_or_idle_locked() const { return !done_.empty() || pending_.empty(); }

  mutable std::mutex mu_;
  IoCounters counters_;  // backends add syscalls/submit_calls/retries/short_reads via finish
  size_t in_flight_ = 0;
  size_t prefetch_in_flight_ = 0;        // prefetch ops in flight
  size_t nonspec_in_flight_ = 0;         // demand and prefetch ops in flight
  uint64_t prefetch_bytes_in_flight_ = 0;
  const std::shared_ptr<ReadFile> file_;

 private:
  void unqueue_locked(Request* r);
  void complete_locked(Request* r);
  void validate(const IoRequest& req) const;

  const IoMode mode_;
  const int queue_depth_;
  const uint64_t prefetch_bytes_;  // prefetch bytes in flight at most (0: unlimited)
  std::deque<Request*> queue_[kIoPriorities];  // indexed by IoPriority
  std::unordered_map<uint64_t, std::unique_ptr<Request>> pending_;
  std::deque<IoCompletion> done_;
  std::condition_variable done_cv_;
  Clock::time_point busy_since_;
  Clock::time_point nonspec_since_;
};

// A pool of worker threads, each running one op at a time with a synchronous read function;
// at most min(n_threads, queue_depth) ops in flight.
class WorkerPoolEngine : public QueuedIoEngine {
 protected:
  struct Task {
    IoOp op;
    uint64_t tag = 0;
    IoPriority priority = IoPriority::demand;
    uint64_t seq = 0;
  };
  WorkerPoolEngine(IoMode mode, std::shared_ptr<ReadFile> file, const IoOptions& opts);
  // Derived constructors call start() once their members are ready, destructors call stop().
  void start();
  void stop();
  virtual OpResult run_op(int worker, const Task& t) = 0;
  virtual void on_op_started_locked(const Task& t) { (void)t; }
  void kick_locked() override { work_cv_.notify_all(); }
  int n_threads() const { return n_threads_; }

 private:
  void worker(int index);
  const int n_threads_;
  std::vector<std::thread> threads_;
  std::condition_variable work_cv_;
  bool stop_ = false;
};

std::unique_ptr<IoEngine> make_pread_engine(std::shared_ptr<ReadFile> file, const IoOptions& o);
std::unique_ptr<IoEngine> make_naive_engine(std::shared_ptr<ReadFile> file, const IoOptions& o);
std::unique_ptr<IoEngine> make_fake_engine(std::shared_ptr<ReadFile> file, const IoOptions& o);
std::unique_ptr<IoEngine> make_uring_engine(std::shared_ptr<ReadFile> file, const IoOptions& o);
// Whether this build has io_uring and this kernel lets the process set up a ring with READ.
bool uring_usable();

}  // namespace les::storage::detail
