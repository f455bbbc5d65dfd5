#include "les/vision/image_decode.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "les/util/error.h"

// stb_image's implementation lives in this file alone, its functions static (no clash with another
// copy linked into the same program), and this file stays out of the unity batches
// (CMakeLists.txt). Debian's libstb-dev header, from a system include directory: its own warnings
// are not reported.
// Only the two formats images come in (less of the decoder to trust with untrusted bytes).
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#include <stb/stb_image.h>

namespace les::vision {

namespace {

// stb's reason for the last failure on this thread (its failure string is thread-local).
std::string stb_reason() {
  const char* r = stbi_failure_reason();
  return r != nullptr ? r : "unknown reason";
}

// The format a file's first bytes announce, for messages ("" if none stb's common readers know).
const char* signature(const uint8_t* d, size_t n) {
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 8 && std::memcmp(d, png, 8) == 0) return "PNG";
  if (n >= 2 && d[0] == 0xff) {  // SOI after any fill bytes, as stb's JPEG reader accepts it
    size_t i = 1;
    while (i < n && d[i] == 0xff) ++i;
    if (i < n && d[i] == 0xd8) return "JPEG";
  }
  if (n >= 4 && std::memcmp(d, "GIF8", 4) == 0) return "GIF";
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return "BMP";
  return "";
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void check_pixels(const std::string& what, int64_t w, int64_t h, int64_t max_pixels) {
  if (w * h > max_pixels) {
    throw Error(strfmt("image %s: %lld x %lld = %lld pixels, more than the limit of %lld", what.c_str(),
                       static_cast<long long>(w), static_cast<long long>(h), static_cast<long long>(w * h),
                       static_cast<long long>(max_pixels)));
  }
}

// Debian 12's stb_image (2.27) trusts a JPEG's Huffman tables: it builds one from the 16 code
// counts of a DHT segment without checking that they sum to at most 256 (a crafted file writes
// past the table), and a scan may name a table no DHT defined (read uninitialized). fuzz_image
// found both; later stb versions refuse such files. The JPEG's segments are walked here first, as
// the decoder walks them (markers, lengths, entropy-coded data after each SOS), and a table with
// more than 256 codes, a scan using an undefined table, or a table segment running past the end is
// refused before stb sees the bytes (stbi_info already reads the tables).
void check_jpeg_tables(const uint8_t* d, size_t n, const std::string& what) {
  auto bad = [&](const std::string& why) {
    throw Error(strfmt("image %s: corrupt JPEG (%s)", what.c_str(), why.c_str()));
  };
  bool defined[2][4] = {};  // [DC, AC][table]
  size_t p = 1;
  while (p < n && d[p] == 0xff) ++p;
  ++p;  // after SOI (signature() found it)
  while (p < n) {
    if (d[p] != 0xff) {
      ++p;  // entropy-coded data or junk between segments: look for the next marker
      continue;
    }
    while (p < n && d[p] == 0xff) ++p;  // fill bytes
    if (p >= n) return;
    const uint8_t m = d[p++];
    if (m == 0x00 || (m >= 0xd0 && m <= 0xd7) || m == 0x01 || m == 0xd8) continue;  // stuffing, RSTn, TEM, SOI
    if (m == 0xd9) return;                                                           // EOI
    if (p + 2 > n) return;  // truncated: the decoder reports it
    const size_t len = (size_t{d[p]} << 8) | d[p + 1];
    if (len < 2) bad("a segment length below 2");
    const size_t end = p + len;
    if (m == 0xc4) {
      if (end > n) bad("a Huffman table segment runs past the end of the file");
      size_t q = p + 2;
      while (q < end) {
        if (q + 17 > end) bad("a Huffman table segment is cut short");
        const int tc = d[q] >> 4, th = d[q] & 15;
        size_t codes = 0;
        for (int i = 1; i <= 16; ++i) codes += d[q + static_cast<size_t>(i)];
        if (codes > 256) bad(strfmt("a Huffman table with %zu codes, more than 256", codes));
        if (tc <= 1 && th <= 3) defined[tc][th] = true;
        q += 17 + codes;
      }
    } else if (m == 0xda) {  // SOS: the tables its components use must exist
      if (end > n || len < 3) bad("a scan header runs past the end of the file");
      const size_t ns = d[p + 2];
      if (len < 6 + 2 * ns) bad("a scan header is cut short");
      const uint8_t ss = d[p + 3 + 2 * ns], se = d[p + 4 + 2 * ns];
      for (size_t c = 0; c < ns; ++c) {
        const int td = d[p + 4 + 2 * c] >> 4, ta = d[p + 4 + 2 * c] & 15;
        if ((ss == 0 && (td > 3 || !defined[0][td])) || (se > 0 && (ta > 3 || !defined[1][ta]))) {
          bad("a scan uses a Huffman table no DHT segment defined");
        }
      }
    }
    p = end;
  }
}

struct StbFree {
  void operator()(stbi_uc* p) const { stbi_image_free(p); }
};

}  // namespace

ImageU8 decode_image_bytes(const uint8_t* data, size_t n, const std::string& what, int64_t max_pixels) {
  if (data == nullptr || n == 0) throw Error(strfmt("image %s: empty (0 bytes)", what.c_str()));
  if (n > static_cast<size_t>(INT_MAX)) {
    throw Error(strfmt("image %s: %zu bytes, more than the %d stb_image reads", what.c_str(), n, INT_MAX));
  }
  const int len = static_cast<int>(n);

  // The header alone first: the size is known before any pixel is decoded or allocated.
  int w = 0, h = 0, comp = 0;
  const std::string fmt = signature(data, n);
  if (fmt == "JPEG") check_jpeg_tables(data, n, what);
  if (!stbi_info_from_memory(data, len, &w, &h, &comp)) {
    // stb tries every reader in turn, so its reason is often the last one's "unknown image type";
    // and its PNG reader refuses a zero side, or more than 2^30 bytes of pixels, at the header.
    const std::string reason = stb_reason();
    if (fmt == "PNG" && n >= 24 && std::memcmp(data + 12, "IHDR", 4) == 0) {
      const uint32_t pw = be32(data + 16), ph = be32(data + 20);
      if (pw == 0 || ph == 0) throw Error(strfmt("image %s: zero width or height (%u x %u)", what.c_str(), pw, ph));
      check_pixels(what, pw, ph, max_pixels);
    }
    if (!fmt.empty()) {
      throw Error(strfmt("image %s: corrupt or truncated %s header (%s; %zu bytes)", what.c_str(), fmt.c_str(),
                         reason == "unknown image type" ? "stb_image cannot read it" : reason.c_str(), n));
    }
    throw Error(strfmt("image %s: not an image stb_image can read (%s; %zu bytes)", what.c_str(), reason.c_str(), n));
  }
  if (w <= 0 || h <= 0) throw Error(strfmt("image %s: zero width or height (%d x %d)", what.c_str(), w, h));
  check_pixels(what, w, h, max_pixels);
  const int64_t pixels = static_cast<int64_t>(w) * h;

  int w2 = 0, h2 = 0, c2 = 0;
  std::unique_ptr<stbi_uc, StbFree> px(stbi_load_from_memory(data, len, &w2, &h2, &c2, 3));
  if (!px) {
    throw Error(strfmt("image %s (%s%s%d x %d): corrupt or truncated (%s)", what.c_str(), fmt.c_str(),
                       fmt.empty() ? "" : ", ", w, h, stb_reason().c_str()));
  }
  if (w2 != w || h2 != h) {
    throw Error(strfmt("image %s: header says %d x %d, decoded %d x %d", what.c_str(), w, h, w2, h2));
  }
  ImageU8 img;
  img.width = w;
  img.height = h;
  img.rgb.assign(px.get(), px.get() + static_cast<size_t>(pixels) * 3);
  return img;
}

ImageU8 decode_image_file(const std::string& path, int64_t max_pixels) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(strfmt("image %s: cannot open: %s", path.c_str(), errno_text(errno).c_str()));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(strfmt("image %s: cannot stat: %s", path.c_str(), errno_text(errno).c_str()));
  if (!S_ISREG(st.st_mode)) throw Error(strfmt("image %s: not a regular file", path.c_str()));
  if (st.st_size == 0) throw Error(strfmt("image %s: empty file (0 bytes)", path.c_str()));
  if (st.st_size > static_cast<off_t>(INT_MAX)) {
    throw Error(strfmt("image %s: %lld bytes, more than the %d stb_image reads", path.c_str(),
                       static_cast<long long>(st.st_size), INT_MAX));
  }
  std::vector<uint8_t> buf(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t r = ::read(fd, buf.data() + got, buf.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(strfmt("image %s: read failed: %s", path.c_str(), errno_text(errno).c_str()));
    }
    if (r == 0) break;  // shrank while being read: decode what is there
    got += static_cast<size_t>(r);
  }
  if (got == 0) throw Error(strfmt("image %s: empty file (0 bytes)", path.c_str()));
  return decode_image_bytes(buf.data(), got, path, max_pixels);
}

}  // namespace les::vision
