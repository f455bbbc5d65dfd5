// Fuzz target: the packed-format reader (read_pack_info) on the header of a GGUF file. The input
// is the bytes before the data section; the file is taken to extend 1 TiB past them, so that
// extents are checked only by the pack reader's own rules (fuzz_gguf covers extents against the
// real size). Contract: any input throws les::Error or yields pack metadata that satisfies the
// invariants pack_format.h states; nothing else.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "les/gguf/gguf.h"
#include "les/pack/pack_format.h"
#include "les/util/error.h"

namespace {

constexpr uint64_t kVirtualDataBytes = uint64_t(1) << 40;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_pack: postcondition failed: %s\n", what);
    std::abort();
  }
}

void check_info(const les::pack::PackInfo& info) {
  int prev_layer = -1;
  for (const auto& pl : info.layers) {
    require(pl.layer > prev_layer, "layers ascending");
    prev_layer = pl.layer;
    require(info.layer(pl.layer) == &pl, "layer lookup");
    require(pl.stride > 0 && pl.stride % les::pack::kAlignment == 0, "stride a multiple of 4096");
    require(pl.file_offset % les::pack::kAlignment == 0, "row 0 aligned");
    require(pl.checksums.size() == static_cast<size_t>(pl.n_expert), "one checksum per expert");
    uint64_t end = 0;
    for (int p = 0; p < les::pack::kParts; ++p) {
      const auto& part = pl.parts[p];
      require(part.offset == end, "parts adjacent");
      require(part.ne.size() == 3 && part.ne[2] == pl.n_expert, "part shape");
      require(part.expert_bytes == les::row_bytes(part.type, part.ne[0] * part.ne[1]), "part bytes");
      end += part.expert_bytes;
    }
    require(end == pl.data_bytes && end <= pl.stride, "row data inside the stride");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  les::gguf::File f;
  try {
    f = les::gguf::parse(data, size, size + kVirtualDataBytes);
  } catch (const les::Error&) {
    return 0;
  }
  if (!les::pack::is_packed(f)) return 0;
  try {
    check_info(les::pack::read_pack_info(f, "fuzz"));
  } catch (const les::Error&) {
  }
  return 0;
}
