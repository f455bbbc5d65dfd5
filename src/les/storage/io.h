// Storage mechanism: getting byte ranges of a file into memory the caller owns, as fast as the
// device allows, with demand reads ahead of prefetches. No policy lives here: which experts to
// read and when is the expert cache's and scheduler's business; this layer only reads what it is
// told, in priority order, and reports what happened.
//
//   ReadFile   an abstract read-only file (a real file opened with or without O_DIRECT, or bytes
//              in memory for tests). alignment() is what offsets, lengths and buffers must be
//              multiples of (4096 with O_DIRECT, 1 otherwise).
//   IoRequest  tag + priority + ops {file_offset, length, dst}. All ops of one request complete
//              together as one IoCompletion.
//   IoEngine   a user-space priority queue (demand before prefetch, FIFO within a priority) over
//              a backend that keeps at most queue_depth ops in flight: io_uring (O_DIRECT, one SQE
//              per op, batched submission), a pread thread pool (O_DIRECT), "naive" buffered pread
//              into a staging buffer + memcpy + posix_fadvise(DONTNEED) (the baseline most engines
//              use), and a fake backend for tests (latency, short reads, EINTR, EIO injection, a
//              log of the order ops started).
//
// Threading: every IoEngine method may be called from any thread (one submitting thread is the
// intended use); completions are handed out by poll()/wait() on the caller's thread, never by
// callbacks on internal threads.
//
// Reads are exact: a short read is retried for the remainder, EINTR/EAGAIN are retried, EOF before
// the requested end is an error naming the file and offsets (the file was truncated), and EIO (or
// any other errno) completes the request with an error message; nothing is ever zero-filled. An op
// may extend past the end of the file only within the file's last 4 KiB block (so that aligned
// reads of an unaligned tail work, on any backend); bytes past EOF in dst are left untouched and
// IoCompletion::bytes counts only the bytes read.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace les::storage {

// ---------------------------------------------------------------------------------------------
// Alignment helpers

inline constexpr size_t kDirectIoAlign = 4096;  // offsets, lengths and buffers of O_DIRECT reads

// a must be a power of two.
constexpr uint64_t align_down(uint64_t x, uint64_t a) { return x & ~(a - 1); }
constexpr uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) & ~(a - 1); }
constexpr bool is_aligned(uint64_t x, uint64_t a) { return (x & (a - 1)) == 0; }

// An arbitrary extent [offset, offset+length) of a file widened to an aligned read: read
// `length` bytes at `file_offset` into an aligned dst, and the wanted bytes start at dst + skip.
// (For original GGUF files whose expert slices are not 4 KiB aligned.)
struct AlignedExtent {
  uint64_t file_offset = 0;  // align_down(offset)
  uint64_t length = 0;       // align_up(offset + length) - file_offset (0 for an empty extent)
  uint64_t skip = 0;         // offset - file_offset
};
AlignedExtent align_extent(uint64_t offset, uint64_t length, size_t alignment = kDirectIoAlign);

// An owning, aligned, uninitialised byte buffer (move-only). capacity() is size rounded up to
// the alignment, so an aligned read of align_up(size) bytes fits.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size, size_t alignment = kDirectIoAlign);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  size_t alignment() const { return alignment_; }
  // Makes [offset, offset + length) resident now, as zeros (its page faults happen here, not at
  // its first use). Buffers of kHugeBufferBytes or more are anonymous mappings on a 2 MiB boundary
  // with transparent huge pages requested (madvise), so this takes one fault per 2 MiB where the
  // kernel grants them.
  void populate(size_t offset, size_t length);
  // The same with up to `threads` threads (the caller's included), each taking a share cut at
  // 2 MiB boundaries: zeroing pages is bound by one core's memory bandwidth. For startup, when
  // nothing else runs.
  void populate_parallel(size_t offset, size_t length, int threads);
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kHugeBufferBytes = size_t{32} << 20;

 private:
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  size_t alignment_ = 0;
  bool mapped_ = false;  // mmap'd (large) rather than posix_memalign'd
};

// ---------------------------------------------------------------------------------------------
// Files

class ReadFile {
 public:
  virtual ~ReadFile() = default;

  virtual const std::string& path() const = 0;  // for messages
  virtual uint64_t size() const = 0;            // at open time
  virtual size_t alignment() const = 0;         // 4096 for O_DIRECT, 1 otherwise
  virtual bool direct() const = 0;              // reads bypass the page cache
  // O_DIRECT was asked for (open_direct) but the filesystem refused it; reads are buffered.
  virtual bool direct_refused() const { return false; }
  // File descriptor for kernel backends (io_uring); -1 for files that have none.
  virtual int fd() const { return -1; }

  // One read call: up to n bytes at offset into dst. Returns the bytes read (0 at EOF, fewer
  // than n on a short read) or -errno. Thread-safe.
  virtual int64_t read_at(void* dst, size_t n, uint64_t offset) const = 0;
  // Drops [offset, offset+n) from the page cache (posix_fadvise DONTNEED); no-op where
  // meaningless. Thread-safe.
  virtual void drop_cache(uint64_t offset, uint64_t n) const {
    (void)offset;
    (void)n;
  }
};

// Opens path with O_DIRECT (alignment 4096). If the filesystem refuses direct I/O (tmpfs, some
// FUSE/overlay mounts), falls back to a buffered file with direct_refused() == true.
// Throws les::Error naming the path and errno text.
std::shared_ptr<ReadFile> open_direct(const std::string& path);
// Opens path for buffered reads (alignment 1). Throws les::Error naming the path.
std::shared_ptr<ReadFile> open_buffered(const std::string& path);
// An in-memory file (tests, the fake backend). `alignment` lets tests emulate O_DIRECT rules.
std::shared_ptr<ReadFile> make_memory_file(std::vector<uint8_t> bytes, std::string name = "<memory>",
                                           size_t alignment = 1);

// ---------------------------------------------------------------------------------------------
// Requests and completions

// Service order: demand, then prefetch, then speculative (a deep guess: it starts only when
// nothing else is queued or in flight, so it uses the device's idle time and never delays a
// nearer read by more than the one op it may have in flight).
enum class IoPriority : uint8_t { prefetch = 0, demand = 1, speculative = 2 };
inline constexpr int kIoPriorities = 3;
// Rank in service order (higher is served first).
constexpr int priority_rank(IoPriority p) {
  return p == IoPriority::demand ? 2 : p == IoPriority::prefetch ? 1 : 0;
}

struct IoOp {
  uint64_t file_offset = 0;
  uint64_t length = 0;
  void* dst = nullptr;  // stays valid and untouched by the caller until the request completes
};

struct IoRequest {
  uint64_t tag = 0;  // caller's id; unique among the engine's pending requests
  IoPriority priority = IoPriority::demand;
  std::vector<IoOp> ops;
};

struct IoCompletion {
  uint64_t tag = 0;
  IoPriority priority = IoPriority::demand;  // at completion (after any promote)
  int err = 0;        // errno of the first failed op (EIO for a truncated file); 0 on success
  std::string error;  // empty on success; else "path: read of N bytes at offset X failed ..."
  uint64_t bytes = 0;              // bytes read into the request's buffers
  uint32_t ops = 0;                // ops of the request
  uint64_t queue_us = 0;           // submit -> first op started
  uint64_t latency_us = 0;         // submit -> complete
  bool ok() const { return err == 0; }
};

struct IoCounters {
  uint64_t requests = 0;     // requests completed (successfully or not)
  uint64_t errors = 0;       // requests completed with an error
  uint64_t cancelled = 0;    // requests removed by cancel()
  uint64_t promoted = 0;     // promote() calls that raised a priority
  uint64_t ops = 0;          // ops started (as submitted)
  uint64_t syscalls = 0;     // read syscalls / SQEs issued, retries included
  uint64_t submit_calls = 0; // io_uring_submit calls (uring); equals syscalls for thread backends
  uint64_t bytes = 0;        // bytes read into callers' buffers
  uint64_t retries = 0;      // reads reissued (short read, EINTR, EAGAIN)
  uint64_t short_reads = 0;  // reads that returned fewer bytes than asked (not at EOF)
  uint64_t busy_us = 0;      // wall time with at least one op in flight
  uint64_t busy_nonspec_us = 0;  // ... with at least one demand or prefetch op in flight
  uint32_t max_in_flight = 0;
  uint64_t fixed_reads = 0;  // READ_FIXED SQEs completed into registered buffers (uring)
};

enum class IoMode : uint8_t { uring, pread, naive, fake };

const char* io_mode_name(IoMode m);
// "uring" | "io_uring" | "pread" | "naive" | "fake"; throws les::Error listing the choices.
IoMode parse_io_mode(std::string_view s);

// Start order log of the fake backend (tests): one entry per op, appended when the op starts.
struct FakeOpRecord {
  uint64_t tag = 0;
  uint64_t file_offset = 0;
  uint64_t length = 0;
  IoPriority priority = IoPriority::demand;
};
class FakeIoLog {
 public:
  void add(const FakeOpRecord& r) {
    std::lock_guard<std::mutex> lk(mu_);
    started_.push_back(r);
  }
  std::vector<FakeOpRecord> started() const {
    std::lock_guard<std::mutex> lk(mu_);
    return started_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<FakeOpRecord> started_;
};

// A gate the fake backend's ops wait at (after being logged as started) while it is closed:
// lets a test hold ops in flight while it submits more, with no timing assumptions. Open it
// before destroying the engine (the destructor waits for ops in flight).
class FakeIoGate {
 public:
  explicit FakeIoGate(bool open = true) : open_(open) {}
  void close() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = false;
  }
  void open() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_;
};

// Faults and timing of the fake backend (IoMode::fake only).
struct FakeIoConfig {
  std::chrono::microseconds latency{0};  // slept by each op before it reads
  // A device model (0: off). op_mbs: one op transfers at most this fast (MB/s, 1e6 bytes), so a
  // large single read is slower than the same bytes as several ops in flight; device_mbs: all
  // ops together transfer at most this fast (a shared timeline ops reserve their bytes on).
  // An op lasts max(latency + bytes / op_mbs, the end of its bytes' turn on the device).
  double op_mbs = 0;
  double device_mbs = 0;
  uint64_t max_read = 0;                 // > 0: each read call returns at most this many bytes
  int eintr_every = 0;                   // > 0: every n-th read call fails with EINTR
  std::vector<uint64_t> eio_offsets;     // a read call covering one of these offsets fails with EIO
  int64_t eio_after_ops = -1;            // >= 0: ops started after the first N fail with EIO
  std::shared_ptr<FakeIoLog> log;        // when set, records each op as it starts
  std::shared_ptr<FakeIoGate> gate;      // when set, each op waits for it to be open
};

struct IoOptions {
  int queue_depth = 16;  // ops in flight in the kernel/device at a time (>= 1)
  int n_threads = 0;     // pread/naive/fake worker threads; 0 = queue_depth
  FakeIoConfig fake{};   // IoMode::fake only
  // Prefetch bytes in flight at most (0: unlimited); one prefetch op may always run. A demand
  // read waits behind every op already in the device, so bounding the prefetch bytes there
  // bounds the latency prefetching adds to a demand read (bytes / bandwidth).
  uint64_t prefetch_bytes = 0;
  // io_uring: reap completions on a thread of their own, which wakes for each one (true), or on
  // the caller's thread inside poll() and wait() (false: no thread switch per read; the ring is
  // set up so that completions never interrupt the caller, and the caller's poll() starts the
  // queued ops that completed reads make room for).
  bool uring_completion_thread = false;
};

// ---------------------------------------------------------------------------------------------
// The engine

class IoEngine {
 public:
  virtual ~IoEngine() = default;  // drops queued requests, waits for ops in flight

  // Queues req; never blocks on I/O. Throws les::Error for an invalid request (misaligned
  // offset/length/dst, op beyond the end of the file, duplicate pending tag). A request
  // without ops completes at once.
  virtual void submit(IoRequest req) = 0;
  // Submits several requests at once (all or nothing), in order: with io_uring their first
  // queue_depth ops go to the kernel with one io_uring_submit (e.g. a layer's prefetches).
  virtual void submit_batch(std::vector<IoRequest> reqs) = 0;
  // Removes a request none of whose ops has started. Returns whether it did; a cancelled
  // request produces no completion.
  virtual bool cancel(uint64_t tag) = 0;
  // Raises a pending request to priority `to` (default demand) if that is higher: its unstarted
  // ops move behind the requests of that priority already queued. Returns whether the tag was
  // pending (true also if its priority was already at least `to`).
  virtual bool promote(uint64_t tag, IoPriority to = IoPriority::demand) = 0;
  // Appends the completions available now; returns how many. Never blocks.
  virtual size_t poll(std::vector<IoCompletion>& out) = 0;
  // Like poll() but waits up to timeout for at least one completion; returns 0 at timeout, or at
  // once when nothing is pending.
  virtual size_t wait(std::vector<IoCompletion>& out, std::chrono::microseconds timeout) = 0;
  // Requests submitted and not yet handed out by poll()/wait() nor cancelled: `while
  // (pending() > 0) wait(...)` receives every completion.
  virtual size_t pending() const = 0;
  virtual IoCounters counters() const = 0;

  // Registers memory that ops' destinations lie in (io_uring: IORING_REGISTER_BUFFERS; a read
  // whose destination lies inside one region then goes as READ_FIXED, without the kernel pinning
  // its pages on every read). Call before the first submit; the regions must stay mapped while the
  // engine lives. Returns the bytes registered: 0 where the backend has no such thing or the
  // kernel refused (e.g. RLIMIT_MEMLOCK for an unprivileged process; `why` then says so), and
  // reads work as before.
  virtual uint64_t register_buffers(const std::vector<std::pair<uint8_t*, size_t>>& regions, std::string* why) {
    (void)regions;
    if (why) *why = "this I/O backend has no registered buffers";
    return 0;
  }

  virtual IoMode mode() const = 0;
  // Which thread collects completed reads, in words for --stats ("worker threads" for the
  // thread backends; io_uring: "the caller's thread" or "a completion thread").
  virtual const char* completions_reaped_by() const { return "worker threads"; }
  virtual int queue_depth() const = 0;
  virtual const ReadFile& file() const = 0;
};

// Creates a backend over file. uring needs a file with fd() >= 0; naive re-opens a direct file
// buffered. Throws les::Error if the backend cannot be set up (for uring: io_uring unavailable
// on this kernel or blocked by seccomp, with the hint to use --io pread).
std::unique_ptr<IoEngine> make_io_engine(IoMode mode, std::shared_ptr<ReadFile> file,
                                         const IoOptions& opts = {});

// True when this build has io_uring support compiled in (LES_HAVE_URING) and this kernel lets the
// process use it (not blocked by seccomp, as in some containers, Android apps and qemu-user; Linux
// 5.6+ for IORING_OP_READ). Checked once per process.
bool have_uring();
// The I/O mode used unless one is asked for: uring where have_uring(), else pread.
IoMode default_io_mode();

}  // namespace les::storage
