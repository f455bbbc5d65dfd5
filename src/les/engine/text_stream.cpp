#include "les/engine/text_stream.h"

#include <algorithm>

namespace les {

size_t incomplete_utf8_tail(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the lead byte of the last character.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return need > back ? back : 0;
  }
  return 0;  // only continuation bytes: invalid, nothing to wait for
}

TextStream::TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

std::string TextStream::push(std::string_view piece) {
  if (stopped_) return {};
  held_.append(piece);
  // The earliest complete stop string ends the text.
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold the longest tail that is a proper prefix of a stop string.
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  size_t emit = held_.size() - keep;
  emit -= incomplete_utf8_tail(std::string_view(held_).substr(0, emit));
  std::string out = held_.substr(0, emit);
  held_.erase(0, emit);
  return out;
}

std::string TextStream::finish() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

}  // namespace les
