// Synthetic vision projectors: random-weight mmproj GGUF files of llama.cpp's projector type
// "minicpmv4_6" (the MiniCPM-V 4.6 / 4.7 vision encoder: a SigLIP ViT, optionally a ViT merger
// after layer insert_layer_id that merges 2x2 windows, and a final 2x2 merger MLP into the text
// model's embedding width), laid out exactly as llama.cpp's converter writes them and as
// tools/mtmd/clip.cpp loads them. For tests of a vision encoder against llama.cpp: the weights
// mean nothing, but their scales keep every activation O(1) (write_mmproj.cpp says how).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace les::synth {

struct MmprojSpec {
  int n_embd = 1152, n_ff = 4304, n_layer = 27, n_head = 16;  // SigLIP-400M ViT
  int patch_size = 14;
  int image_size = 448;        // clip.vision.image_size: the slice size (MiniCPM-V writes scale_resolution here)
  int n_pos_side = 70;         // position embedding table = n_pos_side^2 rows (70x70 buckets)
  int n_merge = 4;             // clip.vision.projector.scale_factor: 2 (4x fewer tokens) or 4 (16x); 4 writes the v.vit_merger.* tensors
  int insert_layer_id = 6;     // clip.vision.wa_layer_indexes = [insert_layer_id]
  int n_ff_vit_merger = 0;     // hidden width of the ViT merger's 2x2 MLP; 0 = 4*n_embd
  int n_ff_merger = 0;         // hidden width of the final merger MLP; 0 = 4*n_embd
  int text_embd = 2048;        // clip.vision.projection_dim and mm.down output width (the text model's n_embd)
  // 2-D weight matrices: "f32", "f16" or "q8_0" (les's type names). q8_0 matrices whose row length
  // (ne[0]) is not a multiple of 32 are written F16, as llama.cpp's converter falls back (SigLIP's
  // ffn_down, rows of 4304). patch_embd is F16 (F32 when type is f32); norms, biases and the
  // position embeddings are F32.
  std::string type = "f16";
  float eps = 1e-6f;
  uint64_t seed = 1;
  std::string name = "synth-mmproj";
};

// Named shapes: "tiny" (64-wide, 4 layers, 112-pixel slices; a few MB, for tests; text_embd 128 =
// les synth's "tiny" text shape), "siglip-400m" (the MiniCPM-V 4.6 encoder's dimensions, the
// struct's defaults). Throws les::Error for other names (listing the known ones).
MmprojSpec mmproj_shape_spec(const std::string& shape);
std::vector<std::string> mmproj_shape_names();

// Checks a spec; throws les::Error naming the offending field (n_merge not 2 or 4,
// insert_layer_id outside [0, n_layer), n_embd not a multiple of n_head, an unknown type, ...).
void validate(const MmprojSpec& spec);

// The hidden widths n_ff_vit_merger / n_ff_merger resolve to (0 = 4 * n_embd).
int mmproj_ff_vit_merger(const MmprojSpec& spec);
int mmproj_ff_merger(const MmprojSpec& spec);

// Total file size the spec produces (header included).
uint64_t mmproj_file_bytes(const MmprojSpec& spec);

// Writes the projector to `path` atomically (validate()s first). The content is a function of the
// spec alone: each tensor is a function of (seed, tensor name, shape, type).
void write_synth_mmproj(const MmprojSpec& spec, const std::string& path);

}  // namespace les::synth
