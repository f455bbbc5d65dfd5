// Image files to 8-bit RGB, as llama.cpp's mtmd helper decodes them (mtmd_helper_bitmap_init_from_buf):
// stb_image with 3 channels requested, so every format stb reads (JPEG, PNG, BMP, GIF's first
// frame, PSD, TGA, HDR, PIC, PNM) gives the same pixels it gives there; grey and alpha are
// expanded or dropped by stb. Failures throw les::Error naming the file and the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "les/vision/image.h"

namespace les::vision {

// The most pixels (width x height) an image may have: 64 Mpx (67,108,864; e.g. 8192 x 8192), 192
// MiB of decoded RGB. Checked from the file's header before anything is decoded or allocated.
inline constexpr int64_t kDefaultMaxImagePixels = 64LL << 20;

// The whole file, decoded. Errors: missing or unreadable file, empty file, not an image stb_image
// reads, corrupt or truncated data, zero width or height, more than max_pixels pixels.
ImageU8 decode_image_file(const std::string& path, int64_t max_pixels = kDefaultMaxImagePixels);

// The same for an encoded image in memory; `what` names it in error messages (a file name, "image
// 2 of the request").
ImageU8 decode_image_bytes(const uint8_t* data, size_t n, const std::string& what,
                           int64_t max_pixels = kDefaultMaxImagePixels);

}  // namespace les::vision
