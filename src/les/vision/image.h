// Images as the vision encoder takes them: decoded 8-bit RGB, and normalized float planes.
#pragma once

#include <cstdint>
#include <vector>

namespace les::vision {

// An 8-bit RGB image: rows top to bottom, pixels interleaved R, G, B (rgb.size() = 3 w h).
struct ImageU8 {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

// A normalized float image, planar: data[(c * height + y) * width + x], c in {R, G, B}.
struct ImageF32 {
  int width = 0;
  int height = 0;
  std::vector<float> data;
};

}  // namespace les::vision
