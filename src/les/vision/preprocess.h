// MiniCPM-V image preprocessing, bit-exact with llama.cpp's mtmd (tools/mtmd/mtmd-image.cpp, commit
// de3ff815): the LLaVA-UHD slicing of mtmd_image_preprocessor_minicpmv (an overview image plus up
// to 9 slices of a refined image), Pillow's fixed-point bicubic resampling (img_tool::resize_pillow),
// the padded resize of the refined image (PAD_CEIL) and clip.cpp's normalization. These are the
// defaults of the minicpmv4_6 projector: bicubic for both images, the overview stretched (PAD_NONE),
// the refined image padded with black (PAD_CEIL).
//
// Same u8 pixels after every resize and crop, same float bits after normalize: the arithmetic is
// the reference's, in the same types (float where it uses float, double where it uses double) and
// the same order; the sizes take the same truncations. tests/test_vision_image.cpp compares with
// references made by llama.cpp's own code (tests/data/vision/README.md).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "les/vision/image.h"

namespace les::vision {

struct PreprocessParams {
  int image_size = 448;  // slice size (clip.vision.image_size)
  int patch_size = 14;   // clip.vision.patch_size
  // Patches merged per side: 2 or 4 (minicpmv4_6's clip.vision.projector.scale_factor). Sizes are
  // aligned to patch_size * n_merge; with 2, an image of at most image_size^2 pixels is not sliced
  // but resized (up or down) to that area, keeping its aspect ratio.
  int n_merge = 4;
  float mean[3] = {0.5f, 0.5f, 0.5f};  // clip.vision.image_mean, image_std
  float std[3] = {0.5f, 0.5f, 0.5f};
};

// What mtmd_image_preprocessor_minicpmv::get_slice_instructions decides for an image size.
struct SliceLayout {
  int overview_w = 0, overview_h = 0;
  int refined_w = 0, refined_h = 0;  // 0 when there are no slices
  int grid_x = 0, grid_y = 0;        // slices per row, rows; 0 when there are none
  struct Slice {
    int x, y, w, h;  // in the refined image
  };
  std::vector<Slice> slices;  // row-major, as mtmd orders them
};

// The layout for a width x height image (sides 1..2^24, width x height < 2^31). Not sliced: with
// n_merge 2, an image of at most image_size^2 pixels (the overview is resized to about that area,
// aspect kept, sides aligned); otherwise an image no larger than image_size on both sides (the
// overview is that image stretched to image_size x image_size, as mtmd does). Other images get an
// overview (scaled down to about image_size^2 pixels when larger, sides aligned) and a grid of up
// to 9 slices. Throws les::Error on bad sizes or parameters.
SliceLayout plan_slices(int width, int height, const PreprocessParams& p);

// Pillow's BICUBIC resize (a = -0.5, separable, horizontal pass first, 22-bit fixed-point weights),
// as mtmd's img_tool::resize with PAD_NONE: a copy when the size is unchanged. Sizes 1..65536.
ImageU8 resize_bicubic(const ImageU8& src, int width, int height);

// mtmd's img_tool::resize with PAD_CEIL: the image scaled by min(width / src.width, height /
// src.height) (float), each side rounded up (at most the target), resized as resize_bicubic does and
// centred (offsets rounded down) on a width x height canvas of pad_color.
ImageU8 resize_with_pad(const ImageU8& src, int width, int height, std::array<uint8_t, 3> pad_color = {0, 0, 0});

// The w x h rectangle at (x, y), which must lie inside the image (les::Error otherwise).
ImageU8 crop(const ImageU8& src, int x, int y, int w, int h);

// Planar floats (x / 255.0f - mean[c]) / std[c], in float, as clip.cpp's from_u8 and normalize.
ImageF32 normalize(const ImageU8& src, const PreprocessParams& p);

struct PreprocessedImage {
  ImageF32 overview;
  std::vector<ImageF32> slices;  // row-major
  int grid_x = 0, grid_y = 0;    // 0 when there are no slices
};

// The images the vision encoder takes for one picture, as mtmd's minicpmv preprocessor makes them:
// the overview (resize_bicubic to the layout's overview size) and the slices (crops of
// resize_with_pad to the refined size), normalized.
PreprocessedImage preprocess_minicpmv(const ImageU8& img, const PreprocessParams& p);

}  // namespace les::vision
