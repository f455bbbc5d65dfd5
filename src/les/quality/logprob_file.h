// llama.cpp's log-probability file (`llama-perplexity --kl-divergence-base FILE` writes it,
// `--kl-divergence` reads it), so that base files from either program work with the other.
//
// Layout (little-endian, no padding):
//   char[8]  "_logits_"
//   int32    n_ctx                      window size
//   int32    n_vocab
//   int32    n_chunk                    number of windows
//   int32    tokens[n_chunk * n_ctx]    the token stream of the windows (as in the text, never
//                                       the BOS that replaces token 0 when add_bos is set)
//   then per window, for the logits positions j = n_ctx/2 .. n_ctx-2 (n_ctx - 1 - n_ctx/2 of them,
//   predicting window tokens n_ctx/2+1 .. n_ctx-1; in WindowOptions terms first = n_ctx/2 + 1),
//   one record of R = 2*((n_vocab+1)/2) + 4 uint16:
//     float32 scale, float32 min_log_prob   (the first 4 uint16)
//     uint16  q[n_vocab] (+ one zero uint16 when n_vocab is odd)
//   log p(i) = scale * q[i] + min_log_prob. Logits more than 16 below the maximum are clamped to
//   it (q = 0); scale = (max - min_clamped) / 65535, so a log-probability is off by at most
//   scale/2 <= 16/131070 = 1.2e-4 nats, and tokens below the clamp read as max - 16 - lse.
//   When reading, llama.cpp drops every term with log p_base <= -16 from the KL sum; so do we.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "les/quality/token_compare.h"
#include "les/quality/window_eval.h"
#include "les/util/mapped_file.h"

namespace les::quality {

constexpr char kLogprobMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

// uint16 per position record.
inline int logprob_record_u16(int n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }
// The file's scored positions per window and the first scored token (WindowOptions::first).
inline int logprob_positions(int n_ctx) { return n_ctx - 1 - n_ctx / 2; }
inline int logprob_first(int n_ctx) { return n_ctx / 2 + 1; }

// Packs softmax(logits) into one record of logprob_record_u16(n_vocab) uint16.
void pack_log_probs(const float* logits, int n_vocab, uint16_t* record);
// log p(i) as a record stores it.
double unpack_log_prob(const uint16_t* record, int i);
// The record's most likely token: the lowest index of the largest q.
int packed_argmax(const uint16_t* record, int n_vocab);

// KL(base || test) etc. with the base given as a record, the way llama.cpp's --kl-divergence
// computes it: terms with log p_base <= -16 are left out of the sum; the base argmax is the
// lowest index of the largest q.
TokenCompare compare_packed(const uint16_t* base_record, const float* test_logits, int n_vocab, int32_t next_token);

// Writes a log-probability file atomically: to path + ".tmp.<pid>", renamed to path by finish().
class LogprobFileWriter {
 public:
  // tokens: the n_chunk * n_ctx tokens of the windows. Throws les::Error when the file cannot be
  // created or the sizes are out of range.
  LogprobFileWriter(std::string path, int n_ctx, int n_vocab, int n_chunk, std::span<const int32_t> tokens);
  ~LogprobFileWriter();  // without finish(): the temp file is removed
  LogprobFileWriter(const LogprobFileWriter&) = delete;
  LogprobFileWriter& operator=(const LogprobFileWriter&) = delete;

  int n_ctx() const { return n_ctx_; }
  int n_vocab() const { return n_vocab_; }
  int n_chunk() const { return n_chunk_; }
  // Appends the next window's logprob_positions(n_ctx) records (packed, in position order).
  void add_window(std::span<const uint16_t> records);
  // After n_chunk windows: flushes, fsyncs and renames onto path.
  void finish();

 private:
  void write_bytes(const void* p, size_t n);
  std::string path_, tmp_;
  int fd_ = -1;
  int n_ctx_, n_vocab_, n_chunk_;
  int windows_written_ = 0;
  bool finished_ = false;
};

// A log-probability file, memory-mapped and checked: magic, header ranges, exact size, token ids.
class LogprobFile {
 public:
  // Throws les::Error naming the file and what is wrong (not a log-probability file, truncated,
  // trailing bytes, token out of range, ...).
  static LogprobFile open(const std::string& path);

  const std::string& path() const { return path_; }
  int n_ctx() const { return n_ctx_; }
  int n_vocab() const { return n_vocab_; }
  int n_chunk() const { return n_chunk_; }
  int first() const { return logprob_first(n_ctx_); }
  int positions() const { return logprob_positions(n_ctx_); }
  std::span<const int32_t> tokens() const { return tokens_; }
  // WindowOptions whose windows and scored tokens are the file's (n_threads etc. left default).
  WindowOptions window_options() const;

  // Record of scored position k (0 <= k < positions()) of window c: it predicts window token
  // first() + k. Throws les::Error when the record's scale / min_log_prob are not plausible.
  const uint16_t* record(int c, int k) const;

 private:
  std::string path_;
  MappedFile map_;
  int n_ctx_ = 0, n_vocab_ = 0, n_chunk_ = 0;
  std::vector<int32_t> tokens_;
  size_t records_offset_ = 0;
};

}  // namespace les::quality
