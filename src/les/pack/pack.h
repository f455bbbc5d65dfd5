// Writing and verifying packed models (les pack / les verify). The format is in pack_format.h and
// docs/packed_format.md: a GGUF file whose routed experts are one contiguous, 4 KiB-aligned
// extent per (layer, expert), so that an expert is one read straight into a cache slot.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace les::pack {

// progress(bytes_done, bytes_total); total may grow once as the work becomes known.
using ProgressFn = std::function<void(uint64_t, uint64_t)>;

struct PackOptions {
  bool overwrite = false;  // replace out_path if it exists (otherwise that is an error)
  // A layer's packed tensor is assembled and written in pieces of at most this many bytes
  // (whole experts; one expert if larger), bounding the memory packing needs.
  uint64_t write_piece = uint64_t(64) << 20;
};

struct PackSummary {
  uint64_t source_bytes = 0;   // size of the source file
  uint64_t output_bytes = 0;   // size of the packed file
  int layers = 0;              // MoE layers packed
  int64_t experts = 0;         // experts packed, all layers
  uint64_t expert_bytes = 0;   // gate+up+down bytes of all experts (padding excluded)
  uint64_t padding_bytes = 0;  // zero bytes that pad rows to 4 KiB multiples
  double seconds = 0;          // wall time
};

// Packs in_path (a GGUF with blk.N.ffn_{gate,up,down}_exps.weight tensors; any architecture) into
// out_path. Every other tensor and key is copied unchanged. Reads the source twice through a
// memory map: once to checksum each expert (the checksums go into the header), once to write
// the rows, re-checking every checksum (a source that changed in between is an error). Writes
// through gguf::Writer: a temporary file next to out_path, fsync, rename; on any error
// (unwritable directory, full disk, bad source) nothing is left at out_path or beside it.
// Memory: one layer's packed tensor (n_expert x stride bytes) at a time.
// Throws les::Error naming the file: out_path exists and !overwrite; out_path is in_path; the
// source is already packed, has no routed expert tensors, or a layer lacks one of the three;
// parts disagree on the number of experts or have a non-weight type.
PackSummary pack_model(const std::string& in_path, const std::string& out_path, const PackOptions& opt = {},
                       const ProgressFn& progress = {});

struct VerifySummary {
  int layers = 0;
  int64_t experts = 0;
  int64_t tensors = 0;                // tensors (other than packed rows) scanned for non-finite values
  uint64_t bytes = 0;                 // bytes read (expert rows and the other tensors)
  double seconds = 0;
  std::vector<std::string> problems;  // one line per bad expert ("layer L, expert E: ...") or tensor
  bool ok() const { return problems.empty(); }
};

// Checks a packed file: its structure (the GGUF container, read_pack_info's checks) — a
// structural fault (truncated file, missing or inconsistent keys) throws les::Error — then reads
// every expert row and compares the xxh3-64 of its gate+up+down bytes with the recorded checksum
// and checks that its padding is zero; each failing expert becomes one line in problems, naming
// the layer and expert. Reads with pread in large chunks and drops them from the page cache.
// It also scans every expert's gate/up/down matrices and every other tensor for non-finite values
// (quant/finite.h: NaN/inf floats, NaN/inf block scales): one line per bad part or tensor naming
// it and its first bad block.
// Throws les::Error for a file without pack metadata ("not a packed model").
VerifySummary verify_packed(const std::string& path, const ProgressFn& progress = {});

// Checks any GGUF file (packed or not): the container's structure (a structural fault throws
// les::Error), then every tensor's data for non-finite values as above; a packed file gets
// verify_packed's full check. Reads each tensor with pread in chunks of whole blocks.
VerifySummary verify_weights(const std::string& path, const ProgressFn& progress = {});

}  // namespace les::pack
