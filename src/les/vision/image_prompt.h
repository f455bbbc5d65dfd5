// An image's place in a text model's prompt, as llama.cpp's mtmd lays it out for MiniCPM-V
// (projector minicpmv4_6, slice template "minicpmv 2.6"):
//   <image> [overview rows] </image>
//   then, when the image was sliced, row by row: <slice> [slice rows] </slice> ... with "\n"
//   between rows (none after the last).
// Visual tokens take the positions of Context::kEmbeddingRow placeholders, one per row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "les/tokenizer/tokenizer.h"
#include "les/util/thread_pool.h"
#include "les/vision/encoder.h"
#include "les/vision/image.h"
#include "les/vision/mmproj.h"

namespace les::vision {

// The marker tokens, found as mtmd finds them: the first token whose text (special tokens
// rendered) is exactly "<image>", "</image>", "<slice>", "</slice>", "\n".
struct ImageMarkers {
  int32_t image_start = -1, image_end = -1, slice_start = -1, slice_end = -1, row_end = -1;
};
// Throws les::Error naming the tokens the vocabulary lacks.
ImageMarkers find_image_markers(const Tokenizer& tok);

// One image's tokens (with kEmbeddingRow placeholders) and their rows [n_rows][out_embd].
struct ImageChunk {
  std::vector<int32_t> tokens;
  std::vector<float> rows;
  int64_t n_rows = 0;
  int n_slices = 0;            // slices besides the overview
  int grid_x = 0, grid_y = 0;
  double preprocess_seconds = 0, encode_seconds = 0;
};

// Options of one image's encoding.
struct ImageOptions {
  int compression = 0;         // 4 or 16; 0: the file's own
};

// The compression an mmproj runs at (the file's, or the one asked for, if the file can).
// Throws les::Error for a value other than 4 or 16, or 16 without the ViT merger.
int image_merge(const Mmproj& mm, int compression);

// The prompt positions (visual tokens and markers) an image of w x h pixels takes, without
// encoding it (for checks against the context before the work).
int64_t image_positions(const Mmproj& mm, int w, int h, int compression);

// Preprocesses, encodes and lays out one image.
ImageChunk encode_image(const Mmproj& mm, VisionEncoder& enc, const ImageU8& img, const ImageMarkers& markers,
                        const ImageOptions& opt);

// The image's rows alone, overview first then slices row-major (mtmd's order): what
// `les image-embed` writes.
std::vector<float> embed_image(const Mmproj& mm, VisionEncoder& enc, const ImageU8& img, const ImageOptions& opt,
                               int64_t* n_rows = nullptr);

}  // namespace les::vision
