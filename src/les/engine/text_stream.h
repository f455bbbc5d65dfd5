// Turns generated token pieces into text that is safe to show as it comes: whole UTF-8 characters
// only (a character split across tokens is held until it completes), and nothing that may be the
// start of a stop string (held until it either completes the stop string, which ends the text
// there, or stops matching).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace les {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop = {});

  // Adds a piece; returns the text that became safe. After a stop string completes, stopped() is
  // true, the text before it has been returned and everything from it on is dropped.
  std::string push(std::string_view piece);
  // The end of generation: returns whatever is still held (an incomplete character as its bytes).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  std::string held_;
  bool stopped_ = false;
};

// Bytes at the end of s that start a UTF-8 character whose continuation bytes have not arrived
// (0..3).
size_t incomplete_utf8_tail(std::string_view s);

}  // namespace les
