#include "les/quality/logprob_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "les/util/error.h"

namespace les::quality {

namespace {

constexpr size_t kHeaderBytes = 8 + 3 * sizeof(int32_t);
constexpr int kMaxVocab = 1 << 24;
constexpr int kMaxCtx = 1 << 24;
// A record's scale is (max - clamped min) / 65535 with max - min <= 16; allow float rounding.
constexpr float kMaxScale = 16.01f / 65535.0f;

float load_f32(const uint16_t* p) {
  float f;
  std::memcpy(&f, p, sizeof(f));
  return f;
}

void store_f32(uint16_t* p, float f) { std::memcpy(p, &f, sizeof(f)); }

}  // namespace

void pack_log_probs(const float* logits, int n_vocab, uint16_t* record) {
  LES_ASSERT(n_vocab > 0);
  float mx = logits[0], mn = logits[0];
  for (int i = 1; i < n_vocab; ++i) {
    mx = std::max(mx, logits[i]);
    mn = std::min(mn, logits[i]);
  }
  mn = std::max(mn, mx - 16.0f);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = std::log(sum);
  const float scale = (mx - mn) / 65535.0f;
  store_f32(record, scale);
  store_f32(record + 2, static_cast<float>(static_cast<double>(mn) - mx - lse));
  uint16_t* q = record + 4;
  if (scale > 0) {
    const double inv = 1.0 / scale;
    for (int i = 0; i < n_vocab; ++i) {
      const double v = logits[i] > mn ? std::nearbyint((static_cast<double>(logits[i]) - mn) * inv) : 0.0;
      q[i] = static_cast<uint16_t>(std::clamp(v, 0.0, 65535.0));
    }
  } else {
    std::fill(q, q + n_vocab, uint16_t{0});
  }
  if (n_vocab % 2) q[n_vocab] = 0;
}

double unpack_log_prob(const uint16_t* record, int i) {
  return static_cast<double>(load_f32(record)) * record[4 + i] + static_cast<double>(load_f32(record + 2));
}

int packed_argmax(const uint16_t* record, int n_vocab) {
  const uint16_t* q = record + 4;
  int top = 0;
  for (int i = 1; i < n_vocab; ++i) {
    if (q[i] > q[top]) top = i;
  }
  return top;
}

TokenCompare compare_packed(const uint16_t* base_record, const float* test_logits, int n_vocab, int32_t next_token) {
  LES_ASSERT(n_vocab > 0 && next_token >= 0 && next_token < n_vocab);
  const double scale = load_f32(base_record);
  const double min_lp = load_f32(base_record + 2);
  const uint16_t* q = base_record + 4;
  double mt = test_logits[0];
  for (int i = 1; i < n_vocab; ++i) mt = std::max(mt, static_cast<double>(test_logits[i]));
  double st = 0;
  for (int i = 0; i < n_vocab; ++i) st += std::exp(static_cast<double>(test_logits[i]) - mt);
  const double lse_t = mt + std::log(st);
  double kld = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const double lb = scale * q[i] + min_lp;
    if (lb > -16.0) kld += std::exp(lb) * (lb - (static_cast<double>(test_logits[i]) - lse_t));
  }
  TokenCompare r;
  r.kld = kld;
  r.same_top1 = packed_argmax(base_record, n_vocab) == argmax(test_logits, n_vocab);
  r.nll_test = lse_t - static_cast<double>(test_logits[next_token]);
  r.nll_base = -(scale * q[next_token] + min_lp);
  return r;
}

// --- writer ---

LogprobFileWriter::LogprobFileWriter(std::string path, int n_ctx, int n_vocab, int n_chunk,
                                     std::span<const int32_t> tokens)
    : path_(std::move(path)), n_ctx_(n_ctx), n_vocab_(n_vocab), n_chunk_(n_chunk) {
  if (n_ctx < 3 || n_ctx > kMaxCtx || n_vocab < 1 || n_vocab > kMaxVocab || n_chunk < 1) {
    throw Error(strfmt("%s: cannot write a log-probability file for n_ctx=%d, n_vocab=%d, %d windows", path_.c_str(),
                       n_ctx, n_vocab, n_chunk));
  }
  if (tokens.size() != static_cast<size_t>(n_ctx) * static_cast<size_t>(n_chunk)) {
    throw Error(strfmt("%s: %zu tokens given for %d windows of %d", path_.c_str(), tokens.size(), n_chunk, n_ctx));
  }
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(strfmt("%s: cannot create: %s", tmp_.c_str(), std::strerror(errno)));
  const int32_t header[3] = {n_ctx, n_vocab, n_chunk};
  write_bytes(kLogprobMagic, sizeof(kLogprobMagic));
  write_bytes(header, sizeof(header));
  write_bytes(tokens.data(), tokens.size() * sizeof(int32_t));
}

LogprobFileWriter::~LogprobFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void LogprobFileWriter::write_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd_, b, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(strfmt("%s: write failed: %s", tmp_.c_str(), std::strerror(errno)));
    }
    b += w;
    n -= static_cast<size_t>(w);
  }
}

void LogprobFileWriter::add_window(std::span<const uint16_t> records) {
  LES_ASSERT(!finished_);
  if (windows_written_ >= n_chunk_) throw Error(strfmt("%s: more than the %d windows announced", path_.c_str(), n_chunk_));
  const size_t expect = static_cast<size_t>(logprob_positions(n_ctx_)) * static_cast<size_t>(logprob_record_u16(n_vocab_));
  LES_ASSERT(records.size() == expect);
  write_bytes(records.data(), records.size() * sizeof(uint16_t));
  ++windows_written_;
}

void LogprobFileWriter::finish() {
  if (finished_) return;
  if (windows_written_ != n_chunk_) {
    throw Error(strfmt("%s: %d of %d windows written", path_.c_str(), windows_written_, n_chunk_));
  }
  if (::fsync(fd_) != 0) throw Error(strfmt("%s: fsync failed: %s", tmp_.c_str(), std::strerror(errno)));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error(strfmt("%s: close failed: %s", tmp_.c_str(), std::strerror(errno)));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    throw Error(strfmt("%s: rename from %s failed: %s", path_.c_str(), tmp_.c_str(), std::strerror(errno)));
  }
  finished_ = true;
}

// --- reader ---

LogprobFile LogprobFile::open(const std::string& path) {
  LogprobFile f;
  f.path_ = path;
  f.map_ = MappedFile::open(path);
  const uint8_t* d = f.map_.data();
  const size_t size = f.map_.size();
  if (size < sizeof(kLogprobMagic) || std::memcmp(d, kLogprobMagic, sizeof(kLogprobMagic)) != 0) {
    throw Error(strfmt("%s: not a log-probability file (llama-perplexity --kl-divergence-base format): it does not "
                       "start with \"_logits_\"", path.c_str()));
  }
  if (size < kHeaderBytes) {
    throw Error(strfmt("%s: truncated: %zu bytes, the header alone needs %zu", path.c_str(), size, kHeaderBytes));
  }
  int32_t h[3];
  std::memcpy(h, d + 8, sizeof(h));
  f.n_ctx_ = h[0];
  f.n_vocab_ = h[1];
  f.n_chunk_ = h[2];
  if (f.n_ctx_ < 3 || f.n_ctx_ > kMaxCtx) {
    throw Error(strfmt("%s: corrupt header: n_ctx = %d (expected 3..%d)", path.c_str(), f.n_ctx_, kMaxCtx));
  }
  if (f.n_vocab_ < 1 || f.n_vocab_ > kMaxVocab) {
    throw Error(strfmt("%s: corrupt header: n_vocab = %d (expected 1..%d)", path.c_str(), f.n_vocab_, kMaxVocab));
  }
  if (f.n_chunk_ < 1) throw Error(strfmt("%s: corrupt header: %d windows (expected >= 1)", path.c_str(), f.n_chunk_));
  // All factors are below 2^25 and n_chunk below 2^31: the products fit in 64 bits.
  const uint64_t n_tok = static_cast<uint64_t>(f.n_ctx_) * static_cast<uint64_t>(f.n_chunk_);
  const uint64_t rec_bytes = 2ull * static_cast<uint64_t>(logprob_record_u16(f.n_vocab_));
  const uint64_t expect = kHeaderBytes + 4 * n_tok +
                          static_cast<uint64_t>(f.n_chunk_) * static_cast<uint64_t>(f.positions()) * rec_bytes;
  if (size != expect) {
    throw Error(strfmt("%s: %s: %zu bytes, but n_ctx=%d, n_vocab=%d and %d windows need %llu", path.c_str(),
                       size < expect ? "truncated" : "trailing bytes", size, f.n_ctx_, f.n_vocab_, f.n_chunk_,
                       static_cast<unsigned long long>(expect)));
  }
  f.tokens_.resize(static_cast<size_t>(n_tok));
  std::memcpy(f.tokens_.data(), d + kHeaderBytes, f.tokens_.size() * sizeof(int32_t));
  for (size_t i = 0; i < f.tokens_.size(); ++i) {
    if (f.tokens_[i] < 0 || f.tokens_[i] >= f.n_vocab_) {
      throw Error(strfmt("%s: corrupt token list: token %d at index %zu is outside the vocabulary of %d", path.c_str(),
                         f.tokens_[i], i, f.n_vocab_));
    }
  }
  f.records_offset_ = kHeaderBytes + 4 * static_cast<size_t>(n_tok);
  return f;
}

WindowOptions LogprobFile::window_options() const {
  WindowOptions o;
  o.n_ctx = n_ctx_;
  o.first = first();
  o.max_windows = n_chunk_;
  return o;
}

const uint16_t* LogprobFile::record(int c, int k) const {
  LES_ASSERT(c >= 0 && c < n_chunk_ && k >= 0 && k < positions());
  const size_t r = static_cast<size_t>(c) * static_cast<size_t>(positions()) + static_cast<size_t>(k);
  const size_t off = records_offset_ + r * 2 * static_cast<size_t>(logprob_record_u16(n_vocab_));
  const auto* rec = reinterpret_cast<const uint16_t*>(map_.data() + off);
  const float scale = load_f32(rec);
  const float min_lp = load_f32(rec + 2);
  if (!std::isfinite(scale) || scale < 0 || scale > kMaxScale || !std::isfinite(min_lp) || min_lp > 1e-3f ||
      min_lp < -1e4f) {
    throw Error(strfmt("%s: corrupt record for window %d, position %d (byte offset %zu): scale %g, min log-prob %g",
                       path_.c_str(), c, n_ctx_ / 2 + k, off, static_cast<double>(scale), static_cast<double>(min_lp)));
  }
  return rec;
}

}  // namespace les::quality
