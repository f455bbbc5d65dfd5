// The MiniCPM-V 4.6/4.7 vision encoder file: an mmproj GGUF of llama.cpp's projector type
// "minicpmv4_6" (SigLIP ViT with learned position embeddings bucketed to a 70x70 grid, an optional
// ViT merger of 2x2 windows after layer insert_layer_id, and a final 2x2 merger MLP). Every key
// and tensor shape is checked at load; other projector types are refused by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/model/weights.h"
#include "les/util/mapped_file.h"
#include "les/vision/preprocess.h"

namespace les::vision {

struct MmprojConfig {
  int n_embd = 0;          // ViT width
  int n_ff = 0;            // ViT FFN width
  int n_layer = 0;
  int n_head = 0;
  int head_dim = 0;
  int patch_size = 0;
  int image_size = 0;      // slice size (clip.vision.image_size)
  int n_pos = 0;           // position-embedding rows
  int n_pos_side = 0;      // sqrt(n_pos): the bucket grid side (70)
  int n_merge = 0;         // the file's scale factor: 2 (4x fewer tokens) or 4 (16x)
  int insert_layer_id = -1;  // ViT merger after this layer (16x only)
  int n_ff_vit_merger = 0;   // 0 when the file has no ViT merger
  int n_ff_merger = 0;
  int out_embd = 0;        // output width (the text model's n_embd)
  float eps = 1e-6f;
  bool gelu = true;        // ViT FFN activation: tanh GELU (clip.use_gelu) or quick GELU
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
  bool has_vit_merger() const { return n_ff_vit_merger > 0; }
  // Preprocessing at a compression of 4 (n_merge 2) or 16 (n_merge 4).
  PreprocessParams preprocess(int n_merge) const;
};

struct VitLayer {
  Vec ln1_w, ln1_b, ln2_w, ln2_b;
  Matrix q, k, v, o;
  Vec q_b, k_b, v_b, o_b;
  Matrix ff_up, ff_down;
  Vec ff_up_b, ff_down_b;
};

struct MmprojWeights {
  Matrix patch;              // [n_embd][3 * patch * patch], input order (channel, y, x)
  Vec patch_b;               // [n_embd]
  std::vector<float> pos;    // [n_pos][n_embd], converted to F32
  Vec pre_ln_w, pre_ln_b;    // optional
  std::vector<VitLayer> layers;
  Vec post_ln_w, post_ln_b;  // optional
  // ViT merger (present when the file holds it)
  Vec vm_ln1_w, vm_ln1_b;
  Matrix vm_q, vm_k, vm_v, vm_o;
  Vec vm_q_b, vm_k_b, vm_v_b, vm_o_b;
  Vec vm_ds_ln_w, vm_ds_ln_b;      // [4 n_embd]
  Matrix vm_ds_up, vm_ds_down;
  Vec vm_ds_up_b, vm_ds_down_b;
  // Final merger
  Vec mm_norm_w, mm_norm_b;        // [4 n_embd]
  Matrix mm_up, mm_down;
  Vec mm_up_b, mm_down_b;
};

class Mmproj {
 public:
  // Maps and checks path; throws les::Error naming the file and the key or tensor at fault.
  static std::unique_ptr<Mmproj> load(const std::string& path);

  const MmprojConfig& config() const { return cfg_; }
  const MmprojWeights& weights() const { return w_; }
  const std::string& path() const { return path_; }
  // Bytes of the weights in memory.
  uint64_t bytes() const { return file_.size(); }
  // A one-line description: shape, types, compression.
  std::string describe() const;

 private:
  std::string path_;
  MappedFile file_;
  gguf::File gguf_;
  MmprojConfig cfg_;
  MmprojWeights w_;
  std::vector<std::vector<float>> owned_;  // F16 vectors converted to F32
  friend class MmprojLoader;
};

}  // namespace les::vision
