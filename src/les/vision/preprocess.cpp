#include "les/vision/preprocess.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "les/util/error.h"

// Each function names the mtmd-image.cpp (llama.cpp de3ff815) code it reproduces. Casts and types
// follow that code exactly: a float there is a float here, an int truncation is an int truncation.
// Products of two sizes are taken in int64 where mtmd takes them in int: the same value for every
// size plan_slices accepts.

namespace les::vision {

namespace {

struct SizeWH {
  int w, h;
};

void check_params(const PreprocessParams& p) {
  if (p.image_size < 1 || p.image_size > 46340) throw Error(strfmt("vision: image_size %d out of range", p.image_size));
  if (p.patch_size < 1 || p.n_merge < 1 || static_cast<int64_t>(p.patch_size) * p.n_merge > p.image_size) {
    throw Error(strfmt("vision: patch_size %d x n_merge %d does not fit image_size %d", p.patch_size, p.n_merge,
                       p.image_size));
  }
}

void check_u8_image(const ImageU8& img, const char* what) {
  if (img.width < 1 || img.height < 1 ||
      img.rgb.size() != static_cast<size_t>(img.width) * static_cast<size_t>(img.height) * 3) {
    throw Error(strfmt("vision: %s: bad image (%d x %d, %zu bytes)", what, img.width, img.height, img.rgb.size()));
  }
}

// The image's area in slices, as mtmd computes it: (float)w * h / (slice_size * slice_size).
float area_ratio(int width, int height, int slice_size) {
  return static_cast<float>(width) * static_cast<float>(height) / static_cast<float>(slice_size * slice_size);
}

// mtmd_image_preprocessor_llava_uhd::ensure_divide: the nearest multiple (float division, roundf),
// at least one.
int ensure_divide(int length, int patch_size) {
  return std::max(static_cast<int>(std::round(static_cast<float>(length) / patch_size) * patch_size), patch_size);
}

// get_best_resize: an image over scale_resolution^2 pixels (or any, with allow_upscale) scaled to
// about that area, keeping the aspect ratio in float; both sides aligned by ensure_divide.
SizeWH get_best_resize(SizeWH size, int scale_resolution, int patch_size, bool allow_upscale) {
  int width = size.w;
  int height = size.h;
  if (static_cast<int64_t>(width) * height > static_cast<int64_t>(scale_resolution) * scale_resolution ||
      allow_upscale) {
    const float r = static_cast<float>(width) / height;
    height = static_cast<int>(scale_resolution / std::sqrt(r));
    width = static_cast<int>(height * r);
  }
  return {ensure_divide(width, patch_size), ensure_divide(height, patch_size)};
}

// get_refine_size (always called with allow_upscale).
SizeWH get_refine_size(SizeWH original, SizeWH grid, int scale_resolution, int patch_size) {
  const int refine_width = ensure_divide(original.w, grid.w);
  const int refine_height = ensure_divide(original.h, grid.h);
  const SizeWH grid_size{refine_width / grid.w, refine_height / grid.h};
  const SizeWH best = get_best_resize(grid_size, scale_resolution, patch_size, true);
  return {best.w * grid.w, best.h * grid.h};
}

// get_best_grid: among the factorizations m x (n / m) of n in {multiple - 1, multiple, multiple +
// 1} (n != 1, n <= max_slice_nums), in that order, the first whose log aspect ratio is nearest
// (the distance taken in double, compared in float).
SizeWH get_best_grid(int max_slice_nums, int multiple, float log_ratio) {
  SizeWH best{1, 1};
  float min_error = std::numeric_limits<float>::infinity();
  for (int n : {multiple - 1, multiple, multiple + 1}) {
    if (n == 1 || n > max_slice_nums) continue;
    for (int m = 1; m <= n; ++m) {
      if (n % m != 0) continue;
      const SizeWH grid{m, n / m};
      const float error = static_cast<float>(std::abs(log_ratio - std::log(1.0 * grid.w / grid.h)));
      if (error < min_error) {
        best = grid;
        min_error = error;
      }
    }
  }
  return best;
}

// Pillow's separable resampling as img_tool::resize_pillow does it, BICUBIC only.
constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic_filter(double x) {
  if (x < 0.0) x = -x;
  constexpr double a = -0.5;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

uint8_t clip8(int32_t v) { return v < 0 ? 0 : v > 255 ? 255 : static_cast<uint8_t>(v); }

// The fixed-point weights of one dimension: bounds[2 i] = first input pixel of output pixel i,
// bounds[2 i + 1] = how many; weights[i * ksize + k]. Returns ksize.
int precompute_weights(int in_size, int out_size, std::vector<int>& bounds, std::vector<int32_t>& weights) {
  const double filter_support = 2.0;
  double filterscale, scale;
  filterscale = scale = static_cast<double>(in_size) / out_size;
  if (filterscale < 1.0) filterscale = 1.0;
  const double support = filter_support * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;

  std::vector<double> pre(static_cast<size_t>(out_size) * ksize);
  bounds.resize(static_cast<size_t>(out_size) * 2);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    double ww = 0.0;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double* k = &pre[static_cast<size_t>(xx) * ksize];
    int x = 0;
    for (; x < xmax; ++x) {
      const double w = bicubic_filter((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (x = 0; x < xmax; ++x) {
      if (ww != 0.0) k[x] /= ww;
    }
    for (; x < ksize; ++x) k[x] = 0;
    bounds[static_cast<size_t>(xx) * 2 + 0] = xmin;
    bounds[static_cast<size_t>(xx) * 2 + 1] = xmax;
  }

  weights.resize(pre.size());
  const double fxp_scale = std::ldexp(1.0, kPrecisionBits);
  for (size_t i = 0; i < pre.size(); ++i) {
    // Pillow adds +-0.5 and truncates toward zero.
    weights[i] = static_cast<int32_t>(pre[i] * fxp_scale + (pre[i] < 0 ? -0.5 : 0.5));
  }
  return ksize;
}

std::vector<uint8_t> resample_horizontal(const uint8_t* src, int in_nx, int in_ny, int out_nx, int ksize,
                                         const std::vector<int>& bounds, const std::vector<int32_t>& weights) {
  std::vector<uint8_t> out(static_cast<size_t>(out_nx) * in_ny * 3);
  for (int yy = 0; yy < in_ny; ++yy) {
    const uint8_t* src_row = src + static_cast<size_t>(yy) * in_nx * 3;
    uint8_t* dst_row = out.data() + static_cast<size_t>(yy) * out_nx * 3;
    for (int xx = 0; xx < out_nx; ++xx) {
      const int xmin = bounds[static_cast<size_t>(xx) * 2 + 0];
      const int xcnt = bounds[static_cast<size_t>(xx) * 2 + 1];
      const int32_t* k = &weights[static_cast<size_t>(xx) * ksize];
      const uint8_t* p = src_row + static_cast<size_t>(xmin) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < xcnt; ++x) {
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
        p += 3;
      }
      dst_row[xx * 3 + 0] = clip8(s0 >> kPrecisionBits);
      dst_row[xx * 3 + 1] = clip8(s1 >> kPrecisionBits);
      dst_row[xx * 3 + 2] = clip8(s2 >> kPrecisionBits);
    }
  }
  return out;
}

std::vector<uint8_t> resample_vertical(const uint8_t* src, int in_nx, int out_ny, int ksize,
                                       const std::vector<int>& bounds, const std::vector<int32_t>& weights) {
  const size_t row_elems = static_cast<size_t>(in_nx) * 3;
  std::vector<uint8_t> out(row_elems * out_ny);
  std::vector<int32_t> acc(row_elems);
  for (int yy = 0; yy < out_ny; ++yy) {
    const int ymin = bounds[static_cast<size_t>(yy) * 2 + 0];
    const int ycnt = bounds[static_cast<size_t>(yy) * 2 + 1];
    const int32_t* k = &weights[static_cast<size_t>(yy) * ksize];
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < ycnt; ++y) {
      const uint8_t* src_row = src + static_cast<size_t>(ymin + y) * row_elems;
      const int32_t w = k[y];
      for (size_t i = 0; i < row_elems; ++i) acc[i] += src_row[i] * w;
    }
    uint8_t* dst_row = out.data() + static_cast<size_t>(yy) * row_elems;
    for (size_t i = 0; i < row_elems; ++i) dst_row[i] = clip8(acc[i] >> kPrecisionBits);
  }
  return out;
}

void check_target(int width, int height, const char* what) {
  if (width <= 0 || width > 65536 || height <= 0 || height > 65536) {
    throw Error(strfmt("vision: %s: target size %d x %d out of range (1..65536)", what, width, height));
  }
}

// resize_pillow (BICUBIC): the horizontal pass, then the vertical one, each only if its side changes.
ImageU8 resize_pillow_bicubic(const ImageU8& src, int width, int height) {
  const bool need_h = width != src.width;
  const bool need_v = height != src.height;
  std::vector<int> bounds_h, bounds_v;
  std::vector<int32_t> weights_h, weights_v;
  int ksize_h = 0, ksize_v = 0;
  if (need_h) ksize_h = precompute_weights(src.width, width, bounds_h, weights_h);
  if (need_v) ksize_v = precompute_weights(src.height, height, bounds_v, weights_v);

  ImageU8 dst;
  dst.width = width;
  dst.height = height;
  if (need_h && need_v) {
    const std::vector<uint8_t> tmp =
        resample_horizontal(src.rgb.data(), src.width, src.height, width, ksize_h, bounds_h, weights_h);
    dst.rgb = resample_vertical(tmp.data(), width, height, ksize_v, bounds_v, weights_v);
  } else if (need_h) {
    dst.rgb = resample_horizontal(src.rgb.data(), src.width, src.height, width, ksize_h, bounds_h, weights_h);
  } else if (need_v) {
    dst.rgb = resample_vertical(src.rgb.data(), src.width, height, ksize_v, bounds_v, weights_v);
  } else {
    dst.rgb = src.rgb;
  }
  return dst;
}

}  // namespace

SliceLayout plan_slices(int width, int height, const PreprocessParams& p) {
  check_params(p);
  // Sides up to stb_image's 2^24 and an int pixel count: every intermediate size then fits an int.
  if (width < 1 || height < 1 || width > (1 << 24) || height > (1 << 24) ||
      static_cast<int64_t>(width) * height > std::numeric_limits<int>::max()) {
    throw Error(strfmt("vision: cannot plan slices for a %d x %d image", width, height));
  }
  const int slice_size = p.image_size;
  const int patch_size = p.patch_size * p.n_merge;  // slices align to whole merger output tokens
  const SizeWH original{width, height};
  SliceLayout out;

  // mtmd_image_preprocessor_minicpmv::get_slice_instructions: with n_merge 2, an image of at most
  // one slice's area is resized (up or down) to about that area, unsliced.
  if (p.n_merge == 2) {
    if (area_ratio(width, height, slice_size) <= 1.0f) {
      const SizeWH ov = get_best_resize(original, slice_size, patch_size, true);
      out.overview_w = ov.w;
      out.overview_h = ov.h;
      return out;
    }
  }

  // mtmd_image_preprocessor_llava_uhd::get_slice_instructions, without resolution candidates.
  const bool has_slices = width > slice_size || height > slice_size;
  if (!has_slices) {  // the overview alone, stretched to a square slice
    out.overview_w = slice_size;
    out.overview_h = slice_size;
    return out;
  }
  const SizeWH ov = get_best_resize(original, slice_size, patch_size, false);
  out.overview_w = ov.w;
  out.overview_h = ov.h;

  const int max_slice_nums = 9;
  // The log of the float ratio in double (mtmd calls the C library's log), rounded to float.
  const float log_ratio = static_cast<float>(std::log(static_cast<double>(static_cast<float>(width) / height)));
  const float ratio = area_ratio(width, height, slice_size);
  const int multiple = static_cast<int>(std::fmin(std::ceil(static_cast<double>(ratio)), max_slice_nums));
  const SizeWH grid = get_best_grid(max_slice_nums, multiple, log_ratio);
  const SizeWH refine = get_refine_size(original, grid, slice_size, patch_size);
  out.grid_x = grid.w;
  out.grid_y = grid.h;
  out.refined_w = refine.w;
  out.refined_h = refine.h;

  const int step_x = refine.w / grid.w;
  const int step_y = refine.h / grid.h;
  for (int y = 0, iy = 0; y < refine.h && iy < grid.h; y += step_y, ++iy) {
    for (int x = 0, ix = 0; x < refine.w && ix < grid.w; x += step_x, ++ix) {
      out.slices.push_back({x, y, step_x, step_y});
    }
  }
  return out;
}

ImageU8 resize_bicubic(const ImageU8& src, int width, int height) {
  check_u8_image(src, "resize");
  check_target(width, height, "resize");
  if (width == src.width && height == src.height) return src;
  return resize_pillow_bicubic(src, width, height);
}

ImageU8 resize_with_pad(const ImageU8& src, int width, int height, std::array<uint8_t, 3> pad_color) {
  check_u8_image(src, "resize");
  check_target(width, height, "resize");
  if (width == src.width && height == src.height) return src;

  const float scale_w = static_cast<float>(width) / src.width;
  const float scale_h = static_cast<float>(height) / src.height;
  const float scale = std::min(scale_w, scale_h);
  const int new_w = std::min(static_cast<int>(std::ceil(src.width * scale)), width);
  const int new_h = std::min(static_cast<int>(std::ceil(src.height * scale)), height);
  check_target(new_w, new_h, "resize (before padding)");
  const ImageU8 resized = resize_pillow_bicubic(src, new_w, new_h);

  ImageU8 dst;
  dst.width = width;
  dst.height = height;
  dst.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < dst.rgb.size(); i += 3) {
    dst.rgb[i + 0] = pad_color[0];
    dst.rgb[i + 1] = pad_color[1];
    dst.rgb[i + 2] = pad_color[2];
  }
  const int off_x = (width - new_w) / 2;
  const int off_y = (height - new_h) / 2;
  for (int y = 0; y < new_h; ++y) {
    std::copy_n(&resized.rgb[static_cast<size_t>(y) * new_w * 3], static_cast<size_t>(new_w) * 3,
                &dst.rgb[(static_cast<size_t>(y + off_y) * width + off_x) * 3]);
  }
  return dst;
}

ImageU8 crop(const ImageU8& src, int x, int y, int w, int h) {
  check_u8_image(src, "crop");
  if (x < 0 || y < 0 || w <= 0 || h <= 0 || static_cast<int64_t>(x) + w > src.width ||
      static_cast<int64_t>(y) + h > src.height) {
    throw Error(strfmt("vision: crop %d x %d at (%d, %d) outside the %d x %d image", w, h, x, y, src.width,
                       src.height));
  }
  ImageU8 dst;
  dst.width = w;
  dst.height = h;
  dst.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int r = 0; r < h; ++r) {
    std::copy_n(&src.rgb[(static_cast<size_t>(y + r) * src.width + x) * 3], static_cast<size_t>(w) * 3,
                &dst.rgb[static_cast<size_t>(r) * w * 3]);
  }
  return dst;
}

ImageF32 normalize(const ImageU8& src, const PreprocessParams& p) {
  check_u8_image(src, "normalize");
  ImageF32 out;
  out.width = src.width;
  out.height = src.height;
  const size_t n = static_cast<size_t>(src.width) * src.height;
  out.data.resize(n * 3);
  for (int c = 0; c < 3; ++c) {
    const float mean = p.mean[c], sd = p.std[c];
    float* dst = out.data.data() + c * n;
    for (size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(src.rgb[i * 3 + c]) / 255.0f;
      dst[i] = (v - mean) / sd;
    }
  }
  return out;
}

PreprocessedImage preprocess_minicpmv(const ImageU8& img, const PreprocessParams& p) {
  check_u8_image(img, "preprocess");
  const SliceLayout layout = plan_slices(img.width, img.height, p);
  PreprocessedImage out;
  // mtmd_image_preprocessor_llava_uhd::slice_image with minicpmv4_6's hparams: the overview
  // bicubic without padding, the refined image bicubic with PAD_CEIL in black.
  out.overview = normalize(resize_bicubic(img, layout.overview_w, layout.overview_h), p);
  if (!layout.slices.empty()) {
    const ImageU8 refined = resize_with_pad(img, layout.refined_w, layout.refined_h);
    for (const SliceLayout::Slice& s : layout.slices) {
      out.slices.push_back(normalize(crop(refined, s.x, s.y, s.w, s.h), p));
    }
    out.grid_x = layout.grid_x;
    out.grid_y = layout.grid_y;
  }
  return out;
}

}  // namespace les::vision
