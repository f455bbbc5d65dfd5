#include "les/tokenizer/unicode.h"

#include <array>
#include <memory>

namespace les::unicode {

// unicode_tables.cpp (generated)
extern const uint32_t kCategoryRanges[];
extern const size_t kCategoryRangesCount;

namespace {

constexpr uint32_t kMaxCp = 0x110000;

// One byte per code point (1.1 MB), built once on first use from the range table.
const uint8_t* flag_table() {
  static const std::unique_ptr<uint8_t[]> table = [] {
    std::unique_ptr<uint8_t[]> t(new uint8_t[kMaxCp]);
    for (size_t i = 0; i < kCategoryRangesCount; ++i) {
      const uint32_t start = kCategoryRanges[i] >> 8;
      const uint32_t end = i + 1 < kCategoryRangesCount ? (kCategoryRanges[i + 1] >> 8) : kMaxCp;
      const uint8_t cat = static_cast<uint8_t>(kCategoryRanges[i] & 0xFF);
      for (uint32_t c = start; c < end; ++c) t[c] = cat;
    }
    // White_Space (PropList.txt)
    static constexpr uint32_t kWs[] = {0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F,
                                       0x3000};
    for (uint32_t c = 0x09; c <= 0x0D; ++c) t[c] |= kWhitespace;
    for (uint32_t c = 0x2000; c <= 0x200A; ++c) t[c] |= kWhitespace;
    for (uint32_t c : kWs) t[c] |= kWhitespace;
    return t;
  }();
  return table.get();
}

struct ByteMaps {
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 512> from_cp;  // byte code points are all < 0x144
};

const ByteMaps& byte_maps() {
  static const ByteMaps maps = [] {
    ByteMaps m;
    m.from_cp.fill(-1);
    auto direct = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                                     (b >= 0xAE && b <= 0xFF); };
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = direct(b) ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      m.to_utf8[b] = encode_utf8(cp);
      m.from_cp[cp] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return maps;
}

}  // namespace

uint8_t flags(uint32_t cp) { return cp < kMaxCp ? flag_table()[cp] : static_cast<uint8_t>(UNDEF); }

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  auto cont = [&](size_t i) { return i < n && (p[i] & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      out.push_back(c);
      i += 1;
    } else if (c < 0xC0) {  // stray continuation byte
      out.push_back(kReplacement);
      i += 1;
    } else if (c < 0xE0) {
      if (cont(i + 1)) {
        out.push_back((uint32_t(c & 0x1F) << 6) | (p[i + 1] & 0x3F));
        i += 2;
      } else {
        out.push_back(kReplacement);
        i += 1;
      }
    } else if (c < 0xF0) {
      if (cont(i + 1) && cont(i + 2)) {
        out.push_back((uint32_t(c & 0x0F) << 12) | (uint32_t(p[i + 1] & 0x3F) << 6) |
                      (p[i + 2] & 0x3F));
        i += 3;
      } else {
        out.push_back(kReplacement);
        i += 1;
      }
    } else if (c < 0xF8) {
      if (cont(i + 1) && cont(i + 2) && cont(i + 3)) {
        out.push_back((uint32_t(c & 0x07) << 18) | (uint32_t(p[i + 1] & 0x3F) << 12) |
                      (uint32_t(p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F));
        i += 4;
      } else {
        out.push_back(kReplacement);
        i += 1;
      }
    } else {
      out.push_back(kReplacement);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp <= 0x7F) {
    out.push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    append_utf8(out, kReplacement);
  }
}

std::string encode_utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c < 0xE0) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c < 0xF0) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c < 0xF5) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

const std::string& byte_to_bpe_utf8(uint8_t b) { return byte_maps().to_utf8[b]; }

int bpe_cp_to_byte(uint32_t cp) { return cp < 512 ? byte_maps().from_cp[cp] : -1; }

}  // namespace les::unicode
