// The MiniCPM-V 4.6/4.7 vision encoder on les's kernels: one preprocessed image (an overview or a
// slice) in, its visual tokens out ([n_tokens][out_embd] floats, the rows the text model takes in
// place of token embeddings), computed as llama.cpp's clip_graph_minicpmv4_6 computes them:
//   patches (conv as a product) + bias + learned position embedding (bucketed to the table's grid)
//   -> ViT layers (LayerNorm, attention, GELU MLP)
//   -> [16x] after layer insert_layer_id: ViT merger (attention inside 2x2 windows, then each 2x2
//      block's 4 rows concatenated -> LayerNorm -> GELU MLP, plus their mean) -> remaining layers
//   -> post LayerNorm -> final merger (2x2 rows concatenated -> LayerNorm -> erf-GELU MLP).
// Products run batched over all patches on the pool's threads; the result does not depend on the
// thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "les/model/matmul.h"
#include "les/util/thread_pool.h"
#include "les/vision/image.h"
#include "les/vision/mmproj.h"

namespace les::vision {

class VisionEncoder {
 public:
  VisionEncoder(const Mmproj& mmproj, ThreadPool& pool);

  // Visual tokens of one image at compression 4 (merge 2) or 16 (merge 4); 16 needs the ViT merger.
  // The image's sides must be multiples of patch_size * 2 * (merge / 2) * ... as the preprocessor
  // makes them (patch_size * merge). Throws les::Error otherwise.
  std::vector<float> encode(const ImageF32& img, int merge);

  // Output tokens for an image of w x h pixels at a merge.
  int n_tokens(int w, int h, int merge) const;
  int out_embd() const { return mm_.config().out_embd; }

  // Attention as llama.cpp's CPU flash attention computes it (the default: the embeddings match
  // llama.cpp's mtmd, vision/flash_attention.h), or exact (float throughout, as ggml's attention
  // without flash attention).
  void set_exact_attention(bool exact) { exact_attention_ = exact; }

 private:
  void layer_norm(const float* x, int64_t n, int64_t width, const Vec& w, const Vec& b, float* y);
  // y[n][n_out] = W x + b
  void linear(const Matrix& W, const Vec& b, const float* x, int64_t n, float* y);
  // Multi-head self-attention of x[n][E] (already normed) through q/k/v/o; window > 0 restricts
  // attention to consecutive groups of `window` rows. out[n][E].
  void attention(const Matrix& q, const Vec& qb, const Matrix& k, const Vec& kb, const Matrix& v, const Vec& vb,
                 const Matrix& o, const Vec& ob, const float* x, int64_t n, int window, float* out);
  void vit_layer(const VitLayer& L, float* x, int64_t n);
  // 2x2 gather: rows (2i+r) * w + (2j+c) of x[h*w][E] into cat[(h/2)*(w/2)][4E] in order (r,c) =
  // (0,0), (0,1), (1,0), (1,1).
  void gather_2x2(const float* x, int h, int w, float* cat) const;

  const Mmproj& mm_;
  ThreadPool& pool_;
  bool exact_attention_ = false;
  std::vector<uint16_t> q16_, k16_, v16_;
  QuantizedActs acts_;
  std::vector<float> xn_, q_, k_, v_, att_, tmp_, big_;
  std::vector<float> scores_, vt_;
};

}  // namespace les::vision
