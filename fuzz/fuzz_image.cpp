// Fuzz target: image decoding (Debian's stb) and MiniCPM-V preprocessing on arbitrary bytes.
// Contract (vision/image_decode.h, preprocess.h): decoding either throws les::Error with a message
// or gives an RGB image of width x height pixels (at most the pixel limit, here 2^20 to bound the
// work); such an image always preprocesses into an overview and whole slices whose sizes are
// multiples of patch x merge, with finite values. Never another exception or a crash.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "les/util/error.h"
#include "les/vision/image_decode.h"
#include "les/vision/preprocess.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_image: postcondition failed: %s\n", what);
    std::abort();
  }
}

void check(const les::vision::ImageF32& im, int unit) {
  require(im.width > 0 && im.height > 0 && im.width % unit == 0 && im.height % unit == 0, "aligned sizes");
  require(im.data.size() == static_cast<size_t>(3) * im.width * im.height, "planar RGB size");
  for (float v : im.data) require(std::isfinite(v), "finite values");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  les::vision::ImageU8 img;
  try {
    img = les::vision::decode_image_bytes(data, size, "fuzz input", int64_t{1} << 20);
  } catch (const les::Error& e) {
    require(e.what()[0] != '\0', "a decoding error has a message");
    return 0;
  }
  require(img.width > 0 && img.height > 0 && static_cast<int64_t>(img.width) * img.height <= (int64_t{1} << 20),
          "decoded size within the limit");
  require(img.rgb.size() == static_cast<size_t>(3) * img.width * img.height, "RGB size");
  les::vision::PreprocessParams p;
  p.image_size = 56;  // small slices keep each input's work small
  p.n_merge = (size & 1) ? 2 : 4;
  const les::vision::PreprocessedImage pre = les::vision::preprocess_minicpmv(img, p);
  const int unit = p.patch_size * p.n_merge;
  check(pre.overview, unit);
  require(pre.slices.size() == static_cast<size_t>(pre.grid_x) * pre.grid_y, "slices fill the grid");
  for (const auto& s : pre.slices) check(s, unit);
  return 0;
}
