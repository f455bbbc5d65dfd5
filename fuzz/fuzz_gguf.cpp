// Fuzz target: the GGUF parser on arbitrary bytes, then everything that reads what it parsed:
// the model configuration, the tokenizer vocabulary, and (when those pass) the model loader's
// tensor table checks. Contract under test: any input either loads or throws les::Error;
// nothing else escapes, nothing reads out of bounds, and whatever parses is self-consistent.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "les/gguf/gguf.h"
#include "les/model/config.h"
#include "les/model/model.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"

namespace {

// A violated postcondition of a successful parse: crash so that libFuzzer keeps the input.
void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_gguf: postcondition failed: %s\n", what);
    std::abort();
  }
}

void check_parsed(const les::gguf::File& f) {
  require(f.version == 2 || f.version == 3, "version");
  require(f.alignment != 0 && (f.alignment & (f.alignment - 1)) == 0, "alignment power of two");
  for (const auto& t : f.tensors) {
    require(!t.ne.empty() && t.ne.size() <= les::gguf::kMaxDims, "n_dims");
    require(t.offset % f.alignment == 0, "tensor offset aligned");
    require(f.data_offset + t.offset + t.n_bytes <= f.file_size, "tensor inside the file");
    require(t.n_bytes == les::row_bytes(t.type, t.n_elements()), "tensor byte size");
  }
}

// Loads the bytes as a model file through an anonymous in-memory file.
void try_load_model(const uint8_t* data, size_t size) {
  const int fd = ::memfd_create("fuzz_gguf", MFD_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, data, size) == static_cast<ssize_t>(size)) {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    try {
      les::Model::load(path);
    } catch (const les::Error&) {
    }
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  les::gguf::File f;
  try {
    f = les::gguf::parse(data, size, size);
  } catch (const les::Error&) {
    return 0;
  }
  check_parsed(f);
  bool config_ok = false;
  try {
    les::config_from_gguf(f, "fuzz");
    config_ok = true;
  } catch (const les::Error&) {
  }
  try {
    const les::Tokenizer tok(les::vocab_from_gguf(f));
    const std::vector<int32_t> ids = tok.encode("Hello, world! 123", true, true);
    for (int32_t id : ids) require(id >= 0 && id < tok.n_tokens(), "token id in range");
    (void)tok.decode(ids);
  } catch (const les::Error&) {
  }
  if (config_ok) try_load_model(data, size);
  return 0;
}
