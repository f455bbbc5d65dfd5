// Backend-independent parts of the I/O engine: alignment helpers, the priority queue and request
// bookkeeping, the exact-read state machine, the worker-thread engine and the factory.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "les/storage/io_internal.h"
#include "les/util/error.h"

namespace les::storage {

// ---------------------------------------------------------------------------------------------
// Alignment

AlignedExtent align_extent(uint64_t offset, uint64_t length, size_t alignment) {
  LES_ASSERT(alignment > 0 && (alignment & (alignment - 1)) == 0);
  AlignedExtent e;
  e.file_offset = align_down(offset, alignment);
  e.skip = offset - e.file_offset;
  e.length = length == 0 ? 0 : align_up(offset + length, alignment) - e.file_offset;
  return e;
}

AlignedBuffer::AlignedBuffer(size_t size, size_t alignment) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) {
    throw Error(strfmt("AlignedBuffer: alignment %zu is not a power of two >= %zu", alignment,
                       sizeof(void*)));
  }
  alignment_ = alignment;
  size_ = size;
  capacity_ = static_cast<size_t>(align_up(size, alignment));
  if (capacity_ == 0) return;
  if (capacity_ >= kHugeBufferBytes && alignment <= kHugePage) {
    // Large: anonymous memory on a 2 MiB boundary, transparent huge pages asked for (one page
    // fault per 2 MiB instead of per 4 KiB when it is first touched; populate() touches it).
    const size_t span = capacity_ + kHugePage;
    void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      throw Error(strfmt("AlignedBuffer: cannot map %zu bytes: %s", capacity_, std::strerror(errno)));
    }
    const uintptr_t base = reinterpret_cast<uintptr_t>(m);
    const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (start > base) ::munmap(m, start - base);
    const uintptr_t end = start + capacity_, map_end = base + span;
    if (map_end > end) ::munmap(reinterpret_cast<void*>(end), map_end - end);
    data_ = reinterpret_cast<uint8_t*>(start);
    mapped_ = true;
#ifdef MADV_HUGEPAGE
    ::madvise(data_, capacity_, MADV_HUGEPAGE);  // advisory: without THP, 4 KiB pages
#endif
    return;
  }
  void* p = nullptr;
  const int rc = posix_memalign(&p, alignment, capacity_);
  if (rc != 0) {
    throw Error(strfmt("AlignedBuffer: cannot allocate %zu bytes aligned to %zu: %s", capacity_,
                       alignment, std::strerror(rc)));
  }
  data_ = static_cast<uint8_t*>(p);
}

void AlignedBuffer::release() {
  if (mapped_) {
    ::munmap(data_, capacity_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  mapped_ = false;
}

AlignedBuffer::~AlignedBuffer() { release(); }

void AlignedBuffer::populate(size_t offset, size_t length) {
  LES_ASSERT(offset <= capacity_ && length <= capacity_ - offset);
  if (length == 0) return;
#ifdef MADV_POPULATE_WRITE
  // Page-aligned interior in one call (the kernel zero-fills each page once, no second write);
  // the unaligned edges, and kernels without it, by writing zeros.
  const uintptr_t b = reinterpret_cast<uintptr_t>(data_ + offset), e = b + length;
  const uintptr_t pb = (b + 4095) / 4096 * 4096, pe = e / 4096 * 4096;
  if (pe > pb && ::madvise(reinterpret_cast<void*>(pb), pe - pb, MADV_POPULATE_WRITE) == 0) {
    std::memset(data_ + offset, 0, pb - b);
    std::memset(reinterpret_cast<void*>(pe), 0, e - pe);
    return;
  }
#endif
  std::memset(data_ + offset, 0, length);
}

void AlignedBuffer::populate_parallel(size_t offset, size_t length, int threads) {
  LES_ASSERT(offset <= capacity_ && length <= capacity_ - offset);
  const size_t pieces = std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), length / kHugePage);
  if (pieces <= 1) {
    populate(offset, length);
    return;
  }
  // Cuts at 2 MiB boundaries of the addresses, so that no huge page is faulted by two threads.
  const size_t per = (length / pieces + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t b = reinterpret_cast<uintptr_t>(data_ + offset);
  std::vector<size_t> cuts{offset};
  for (size_t k = 1; k < pieces; ++k) {
    const uintptr_t at = (b + k * per + kHugePage - 1) / kHugePage * kHugePage;
    const size_t off = static_cast<size_t>(at - reinterpret_cast<uintptr_t>(data_));
    if (off > cuts.back() && off < offset + length) cuts.push_back(off);
  }
  cuts.push_back(offset + length);
  std::vector<std::thread> helpers;
  for (size_t k = 1; k + 1 < cuts.size(); ++k) {
    helpers.emplace_back([this, from = cuts[k], to = cuts[k + 1]] { populate(from, to - from); });
  }
  populate(cuts[0], cuts[1] - cuts[0]);
  for (std::thread& t : helpers) t.join();
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      capacity_(std::exchange(o.capacity_, 0)),
      alignment_(std::exchange(o.alignment_, 0)),
      mapped_(std::exchange(o.mapped_, false)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    alignment_ = std::exchange(o.alignment_, 0);
    mapped_ = std::exchange(o.mapped_, false);
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------
// Modes

const char* io_mode_name(IoMode m) {
  switch (m) {
    case IoMode::uring: return "uring";
    case IoMode::pread: return "pread";
    case IoMode::naive: return "naive";
    case IoMode::fake: return "fake";
  }
  return "?";
}

IoMode parse_io_mode(std::string_view s) {
  if (s == "uring" || s == "io_uring") return IoMode::uring;
  if (s == "pread") return IoMode::pread;
  if (s == "naive") return IoMode::naive;
  if (s == "fake") return IoMode::fake;
  throw Error(strfmt("unknown I/O mode '%.*s' (expected uring, pread, naive or fake)",
                     static_cast<int>(s.size()), s.data()));
}

bool have_uring() { return detail::uring_usable(); }

IoMode default_io_mode() { return have_uring() ? IoMode::uring : IoMode::pread; }

std::unique_ptr<IoEngine> make_io_engine(IoMode mode, std::shared_ptr<ReadFile> file,
                                         const IoOptions& opts) {
  if (!file) throw Error("make_io_engine: no file");
  if (opts.queue_depth < 1 || opts.queue_depth > 4096) {
    throw Error(strfmt("%s: I/O queue depth %d out of range [1, 4096]", file->path().c_str(),
                       opts.queue_depth));
  }
  if (opts.n_threads < 0 || opts.n_threads > 1024) {
    throw Error(strfmt("%s: I/O thread count %d out of range [0, 1024]", file->path().c_str(),
                       opts.n_threads));
  }
  switch (mode) {
    case IoMode::uring: return detail::make_uring_engine(std::move(file), opts);
    case IoMode::pread: return detail::make_pread_engine(std::move(file), opts);
    case IoMode::naive: return detail::make_naive_engine(std::move(file), opts);
    case IoMode::fake: return detail::make_fake_engine(std::move(file), opts);
  }
  throw Error("make_io_engine: bad mode");
}

namespace detail {

// ---------------------------------------------------------------------------------------------
// Exact reads

namespace {
constexpr int kMaxRetriesWithoutProgress = 10000;
using ull = unsigned long long;
}  // namespace

std::string read_error_message(const ReadFile& f, const IoOp& op, uint64_t at, int err) {
  return strfmt("%s: read of %llu bytes at offset %llu failed at offset %llu: %s", f.path().c_str(),
                static_cast<ull>(op.length), static_cast<ull>(op.file_offset), static_cast<ull>(at),
                std::strerror(err));
}

void ReadProgress::fail(int err, uint64_t at) {
  res_.err = err;
  res_.error = read_error_message(*f_, op_, at, err);
  res_.bytes = 0;
}

bool ReadProgress::on_result(int64_t r) {
  ++res_.syscalls;
  const uint64_t pos = op_.file_offset + done_;
  if (r < 0) {
    const int e = static_cast<int>(-r);
    last_err_ = e;
    if ((e == EINTR || e == EAGAIN) && ++consecutive_ <= kMaxRetriesWithoutProgress) {
      ++res_.retries;
      return true;
    }
    fail(e, pos);
    return false;
  }
  last_err_ = 0;
  if (r == 0) {
    if (pos >= f_->size()) {  // the op covers the file's (unaligned) tail: all bytes are in
      res_.bytes = done_;
      return false;
    }
    res_.err = EIO;
    res_.error = strfmt(
        "%s: unexpected end of file at offset %llu in a read of %llu bytes at offset %llu "
        "(the file had %llu bytes when opened: truncated?)",
        f_->path().c_str(), static_cast<ull>(pos), static_cast<ull>(op_.length),
        static_cast<ull>(op_.file_offset), static_cast<ull>(f_->size()));
    res_.bytes = 0;
    return false;
  }
  const uint64_t before = done_;
  done_ += std::min<uint64_t>(static_cast<uint64_t>(r), op_.length - done_);
  if (done_ >= op_.length || op_.file_offset + done_ >= f_->size()) {
    res_.bytes = std::min<uint64_t>(done_, op_.length);
    return false;
  }
  // Short read: continue from the last aligned position reached (direct I/O needs aligned
  // offsets; re-reading a few bytes rewrites them with the same content).
  ++res_.short_reads;
  ++res_.retries;
  const uint64_t resume = align_down(done_, f_->alignment());
  if (resume <= before) {
    if (++consecutive_ > kMaxRetriesWithoutProgress) {
      fail(EIO, op_.file_offset + done_);
      return false;
    }
  } else {
    consecutive_ = 0;
  }
  done_ = resume;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Queue and bookkeeping

namespace {
// Whole microseconds from t to now.
uint64_t us_since(Clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}
}  // namespace

QueuedIoEngine::QueuedIoEngine(IoMode mode, std::shared_ptr<ReadFile> file, const IoOptions& opts)
    : file_(std::move(file)),
      mode_(mode),
      queue_depth_(opts.queue_depth),
      prefetch_bytes_(opts.prefetch_bytes) {}

void QueuedIoEngine::validate(const IoRequest& req) const {
  const ReadFile& f = *file_;
  const uint64_t a = f.alignment();
  // Ops may run into the file's last 4 KiB block whatever the file's own alignment, so requests
  // built for a direct file work unchanged on a buffered one (naive mode, O_DIRECT refused).
  const uint64_t limit = align_up(f.size(), std::max<uint64_t>(a, kDirectIoAlign));
  for (const IoOp& op : req.ops) {
    if (op.length == 0) continue;
    const uintptr_t dst = reinterpret_cast<uintptr_t>(op.dst);
    if (!op.dst || !is_aligned(op.file_offset, a) || !is_aligned(op.length, a) || !is_aligned(dst, a)) {
      throw Error(strfmt("%s: read of %llu bytes at offset %llu into %p is not aligned to %llu bytes "
                         "(request %llu)",
                         f.path().c_str(), static_cast<ull>(op.length), static_cast<ull>(op.file_offset),
                         op.dst, static_cast<ull>(a), static_cast<ull>(req.tag)));
    }
    if (op.file_offset >= f.size() || op.length > limit - op.file_offset) {
      throw Error(strfmt("%s: read of %llu bytes at offset %llu is beyond the end of the file "
                         "(%llu bytes; request %llu)",
                         f.path().c_str(), static_cast<ull>(op.length), static_cast<ull>(op.file_offset),
                         static_cast<ull>(f.size()), static_cast<ull>(req.tag)));
    }
  }
}

void QueuedIoEngine::submit(IoRequest req) {
  std::vector<IoRequest> one;
  one.push_back(std::move(req));
  submit_batch(std::move(one));
}

void QueuedIoEngine::submit_batch(std::vector<IoRequest> reqs) {
  for (const IoRequest& req : reqs) validate(req);
  const auto now = Clock::now();
  std::vector<std::unique_ptr<Request>> rs;
  rs.reserve(reqs.size());
  for (IoRequest& req : reqs) {
    auto r = std::make_unique<Request>();
    r->tag = req.tag;
    r->priority = req.priority;
    r->ops = std::move(req.ops);
    r->t_submit = now;
    rs.push_back(std::move(r));
  }
  std::lock_guard<std::mutex> lk(mu_);
  // All or nothing: check every tag before queueing any request.
  for (size_t i = 0; i < rs.size(); ++i) {
    bool dup = pending_.count(rs[i]->tag) != 0;
    for (size_t j = 0; j < i && !dup; ++j) dup = rs[j]->tag == rs[i]->tag;
    if (dup) {
      throw Error(strfmt("%s: I/O request tag %llu is already pending", file_->path().c_str(),
                         static_cast<ull>(rs[i]->tag)));
    }
  }
  bool queued = false;
  for (auto& r : rs) {
    Request* p = r.get();
    pending_.emplace(p->tag, std::move(r));
    if (p->ops.empty()) {
      p->t_start = p->t_submit;
      complete_locked(p);
      continue;
    }
    queue_[static_cast<int>(p->priority)].push_back(p);
    p->queued = true;
    queued = true;
  }
  if (queued) kick_locked();  // one kick: io_uring submits the batch's SQEs with one call
}

void QueuedIoEngine::unqueue_locked(Request* r) {
  if (!r->queued) return;
  auto& q = queue_[static_cast<int>(r->priority)];
  q.erase(std::find(q.begin(), q.end(), r));
  r->queued = false;
}

bool QueuedIoEngine::cancel(uint64_t tag) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = pending_.find(tag);
  if (it == pending_.end() || it->second->started > 0) return false;
  unqueue_locked(it->second.get());
  pending_.erase(it);
  ++counters_.cancelled;
  done_cv_.notify_all();  // a waiter may be waiting for pending_ to drain
  return true;
}

bool QueuedIoEngine::promote(uint64_t tag, IoPriority to) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = pending_.find(tag);
  if (it == pending_.end()) return false;
  Request* r = it->second.get();
  if (priority_rank(r->priority) >= priority_rank(to)) return true;
  const bool was_queued = r->queued;
  unqueue_locked(r);
  r->priority = to;
  ++counters_.promoted;
  if (was_queued) {
    queue_[static_cast<int>(to)].push_back(r);
    r->queued = true;
    kick_locked();
  }
  return true;
}

bool QueuedIoEngine::take_op_locked(OpRef& out) {
  if (in_flight_ >= static_cast<size_t>(queue_depth_)) return false;
  auto& qd = queue_[static_cast<int>(IoPriority::demand)];
  auto& qp = queue_[static_cast<int>(IoPriority::prefetch)];
  auto& qs = queue_[static_cast<int>(IoPriority::speculative)];
  auto& q = !qd.empty() ? qd : !qp.empty() ? qp : qs;
  if (q.empty()) return false;
  if (&q == &qs && in_flight_ > 0) return false;  // speculative reads fill idle time only
  const bool prefetch = &q != &qd;
  Request* r = q.front();
  if (prefetch && prefetch_bytes_ > 0 && prefetch_in_flight_ > 0 &&
      prefetch_bytes_in_flight_ + r->ops[r->next].length > prefetch_bytes_) {
    return false;
  }
  out.req = r;
  out.prefetch = prefetch;
  out.speculative = &q == &qs;
  if (prefetch) {
    ++prefetch_in_flight_;
    prefetch_bytes_in_flight_ += r->ops[r->next].length;
  }
  out.index = r->next++;
  out.seq = counters_.ops++;
  if (r->next == r->ops.size()) {
    q.pop_front();
    r->queued = false;
  }
  const auto now = Clock::now();
  if (r->started++ == 0) r->t_start = now;
  if (in_flight_++ == 0) busy_since_ = now;
  if (!out.speculative && nonspec_in_flight_++ == 0) nonspec_since_ = now;
  counters_.max_in_flight = std::max<uint32_t>(counters_.max_in_flight, static_cast<uint32_t>(in_flight_));
  return true;
}

void QueuedIoEngine::finish_op_locked(const OpRef& ref, OpResult&& res) {
  LES_ASSERT(in_flight_ > 0);
  if (ref.prefetch) {
    LES_ASSERT(prefetch_in_flight_ > 0);
    --prefetch_in_flight_;
    prefetch_bytes_in_flight_ -= ref.op().length;
  }
  if (--in_flight_ == 0) {
    counters_.busy_us += us_since(busy_since_);
  }
  if (!ref.speculative && --nonspec_in_flight_ == 0) {
    counters_.busy_nonspec_us += us_since(nonspec_since_);
  }
  counters_.syscalls += res.syscalls;
  if (mode_ != IoMode::uring) counters_.submit_calls += res.syscalls;
  counters_.retries += res.retries;
  counters_.short_reads += res.short_reads;
  counters_.fixed_reads += res.fixed_reads;
  counters_.bytes += res.bytes;
  Request* r = ref.req;
  ++r->finished;
  r->bytes += res.bytes;
  if (res.err != 0 && r->err == 0) {
    r->err = res.err;
    r->error = std::move(res.error);
    unqueue_locked(r);  // the request failed: do not read the rest of it
    r->next = r->ops.size();
  }
  if (r->next == r->ops.size() && r->finished == r->started) complete_locked(r);
}

void QueuedIoEngine::complete_locked(Request* r) {
  const auto now = Clock::now();
  IoCompletion c;
  c.tag = r->tag;
  c.priority = r->priority;
  c.err = r->err;
  c.error = std::move(r->error);
  c.bytes = r->bytes;
  c.ops = static_cast<uint32_t>(r->ops.size());
  c.queue_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(r->t_start - r->t_submit).count());
  c.latency_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(now - r->t_submit).count());
  ++counters_.requests;
  if (c.err != 0) ++counters_.errors;
  done_.push_back(std::move(c));
  pending_.erase(r->tag);  // destroys r
  done_cv_.notify_all();
}

void QueuedIoEngine::fail_queued_locked(int err, const std::string& message, bool complete_unstarted) {
  std::vector<Request*> queued;
  for (auto& q : queue_) {
    queued.insert(queued.end(), q.begin(), q.end());
    q.clear();
  }
  for (Request* r : queued) {
    r->queued = false;
    r->next = r->ops.size();
    if (r->err == 0) {
      r->err = err;
      r->error = message;
    }
    if (r->started == 0 && !complete_unstarted) {
      pending_.erase(r->tag);
    } else if (r->finished == r->started) {
      if (r->started == 0) r->t_start = Clock::now();
      complete_locked(r);
    }
  }
  done_cv_.notify_all();
}

size_t QueuedIoEngine::poll(std::vector<IoCompletion>& out) {
  std::lock_guard<std::mutex> lk(mu_);
  const size_t n = done_.size();
  for (auto& c : done_) out.push_back(std::move(c));
  done_.clear();
  return n;
}

size_t QueuedIoEngine::wait(std::vector<IoCompletion>& out, std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (done_.empty()) {
    if (pending_.empty()) return 0;
    done_cv_.wait_for(lk, timeout, [&] { return !done_.empty() || pending_.empty(); });
  }
  const size_t n = done_.size();
  for (auto& c : done_) out.push_back(std::move(c));
  done_.clear();
  return n;
}

size_t QueuedIoEngine::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return pending_.size() + done_.size();
}

IoCounters QueuedIoEngine::counters() const {
  std::lock_guard<std::mutex> lk(mu_);
  IoCounters c = counters_;
  if (in_flight_ > 0) {
    c.busy_us += us_since(busy_since_);
  }
  if (nonspec_in_flight_ > 0) {
    c.busy_nonspec_us += us_since(nonspec_since_);
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Worker pool

WorkerPoolEngine::WorkerPoolEngine(IoMode mode, std::shared_ptr<ReadFile> file, const IoOptions& opts)
    : QueuedIoEngine(mode, std::move(file), opts),
      n_threads_(std::min(opts.n_threads > 0 ? opts.n_threads : opts.queue_depth, opts.queue_depth)) {}

void WorkerPoolEngine::start() {
  threads_.reserve(static_cast<size_t>(n_threads_));
  for (int i = 0; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

void WorkerPoolEngine::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    fail_queued_locked(ECANCELED, file_->path() + ": I/O engine shut down", false);
    work_cv_.notify_all();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void WorkerPoolEngine::worker(int index) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    OpRef ref;
    while (!stop_ && !take_op_locked(ref)) work_cv_.wait(lk);
    if (stop_) return;
    Task t{ref.op(), ref.req->tag, ref.req->priority, ref.seq};
    on_op_started_locked(t);
    lk.unlock();
    OpResult res = run_op(index, t);
    lk.lock();
    finish_op_locked(ref, std::move(res));
  }
}

}  // namespace detail
}  // namespace les::storage
