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

// How a fully resident model's file becomes memory.
//   map: the file is memory-mapped. Nothing is read up front and the pages are the page cache's
//     (shared with other processes, reclaimable), but they are mostly 4 KiB pages: a decoded token
//     walks the whole model, and its products then spend much of their time on TLB misses (1.6-1.8x
//     slower decoding on the 30B-A3B shape, docs/benchmarks.md).
//   read: the whole file is read (direct I/O where the file system allows it, 4 readers) into
//     anonymous memory on transparent huge pages that the model owns. Costs the read at load and
//     the model's size in process memory that the kernel cannot reclaim.
//   automatic: read when the file fits with a margin (resident_fits) in the memory available to
//     the process (MemAvailable, and the memory cgroup's headroom: a container's limit) and the
//     kernel grants huge pages; map otherwise (a model larger than memory still runs, paging).
enum class ResidentMemory { automatic, map, read };

// Whether `file_bytes` fit in `available_bytes` (MemAvailable) with room left for the context,
// the KV cache and the rest of the system: 1 GiB plus 1/16 of the file.
bool resident_fits(uint64_t file_bytes, uint64_t available_bytes);
// The choice of ResidentMemory::automatic for a file of `file_bytes` (read or map).
ResidentMemory choose_resident_memory(uint64_t file_bytes, uint64_t available_bytes, bool huge_pages);
// The same with this machine's memory_available_to_process() and THP mode (util/meminfo.h).
ResidentMemory choose_resident_memory(uint64_t file_bytes);
// Whether a tensor holds routed experts (ffn_*_exps, or a packed file's blk.N.ffn_experts_packed):
// what streaming reads on demand; every other tensor is dense (resident).
bool is_routed_expert_tensor(const std::string& name);
// N of a block tensor's name "blk.N.<...>"; -1 for any other name.
int tensor_block(const std::string& name);

// "map", "read", "automatic"; parse_resident_memory throws les::Error for any other name.
const char* resident_memory_name(ResidentMemory m);
ResidentMemory parse_resident_memory(const std::string& name);

struct LoadOptions {
  // true: the whole file is resident, mapped or read as `resident` says.
  // false (streaming): only the dense tensors are read, into memory the model owns (buffered
  // reads whose pages are then dropped from the page cache); routed experts stay on storage and
  // their stacks carry only file offsets (data == nullptr): an expert store provides the bytes.
  // Both work for an original GGUF and for a packed one (les pack): a packed file's expert stacks
  // have expert_stride = its row, and packed() describes its rows and checksums.
  bool map_experts = true;
  ResidentMemory resident = ResidentMemory::automatic;
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
  // Resident mode: how the file became memory (map or read; never automatic). Streaming mode: map.
  ResidentMemory resident_memory() const { return image_.data() ? ResidentMemory::read : ResidentMemory::map; }
  // Resident mode with read: seconds the read took (0 otherwise).
  double resident_read_seconds() const { return read_seconds_; }
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
  // Resident mode: the file's bytes from offset 0 (mapped or read); nullptr in streaming mode.
  const uint8_t* file_image() const { return image_.data() ? image_.data() : file_.data(); }
  MappedFile file_;                 // resident mode, map
  storage::AlignedBuffer image_;    // resident mode, read: the whole file, from offset 0
  double read_seconds_ = 0;
  storage::AlignedBuffer dense_arena_;  // streaming mode: dense tensors, each at a 4 KiB boundary + its block offset
  std::vector<std::vector<float>> owned_;  // F32 conversions of non-F32 norm/bias tensors
  std::map<std::string, std::vector<uint8_t>> replaced_;  // replace_tensor's buffers
  uint64_t dense_bytes_ = 0;
  uint64_t expert_bytes_ = 0;

  friend struct ModelLoader;
};

}  // namespace les
