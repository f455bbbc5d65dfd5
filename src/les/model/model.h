// A loaded model: configuration, tensor views, and the file image they point into.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/model/config.h"
#include "les/model/weights.h"
#include "les/pack/pack_format.h"
#include "les/storage/io.h"
#include "les/util/mapped_file.h"

namespace les {

struct LoadOptions {
  // true: the whole file is memory-mapped (fully resident model).
  // false (streaming): only the dense tensors are read, into memory the model owns (buffered
  // reads whose pages are then dropped from the page cache); routed experts stay on storage and
  // their stacks carry only file offsets (data == nullptr): an expert store provides the bytes.
  // Both work for an original GGUF and for a packed one (les pack): a packed file's expert stacks
  // have expert_stride = its row, and packed() describes its rows and checksums.
  bool map_experts = true;
};

class Model {
 public:
  static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& opt = {});

  const std::string& path() const { return path_; }
  const gguf::File& gguf() const { return gguf_; }
  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return w_; }

  // Bytes of the tensors that are always resident vs the routed experts.
  uint64_t dense_bytes() const { return dense_bytes_; }
  uint64_t expert_bytes() const { return expert_bytes_; }
  // Bytes of one routed expert (gate + up + down) of a layer (padding of a packed row excluded).
  uint64_t expert_size(int layer) const;
  // The weights holding expert layer `layer`'s routed experts: trunk layer `layer`, or the MTP
  // block for layer == n_layer (when the model has a runnable one).
  const LayerWeights& expert_layer(int layer) const;
  // The pack metadata of a packed file (les pack), checked at load; nullptr for an original GGUF.
  const pack::PackInfo* packed() const { return pack_ ? &*pack_ : nullptr; }

  // In-memory weight replacement (sensitivity measurement, tests; model_override.cpp). Replaces the
  // data of weight tensor `name` (a matrix or a routed-expert stack of an unpacked file loaded with
  // mapped experts) by `bytes` of type `t` and the same shape; every view of it (tied output, MTP
  // head) follows. Throws les::Error for an unknown or non-matrix tensor, a type whose block does
  // not divide the row, or a wrong byte count. Not thread-safe against a running Context.
  void replace_tensor(const std::string& name, Type t, std::vector<uint8_t> bytes);
  // Undoes replace_tensor(name): the file's data again (no-op if not replaced).
  void restore_tensor(const std::string& name);

 private:
  Model() = default;
  std::string path_;
  gguf::File gguf_;
  ModelConfig cfg_;
  ModelWeights w_;
  std::optional<pack::PackInfo> pack_;
  MappedFile file_;                 // resident mode
  storage::AlignedBuffer dense_arena_;  // streaming mode: dense tensors, each at a 4 KiB boundary + its block offset
  std::vector<std::vector<float>> owned_;  // F32 conversions of non-F32 norm/bias tensors
  std::map<std::string, std::vector<uint8_t>> replaced_;  // replace_tensor's buffers
  uint64_t dense_bytes_ = 0;
  uint64_t expert_bytes_ = 0;

  friend struct ModelLoader;
};

}  // namespace les
