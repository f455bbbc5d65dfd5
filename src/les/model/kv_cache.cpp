#include "les/model/kv_cache.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "les/quant/kernels.h"
#include "les/util/error.h"

namespace les {

namespace kv_cache_detail {
constexpr Type kKvTypes[] = {Type::F32, Type::F16, Type::BF16, Type::Q8_0, Type::Q4_0,
                             Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::IQ4_NL};
}  // namespace kv_cache_detail

bool is_kv_type(Type t) {
  return std::find(std::begin(kv_cache_detail::kKvTypes), std::end(kv_cache_detail::kKvTypes), t) !=
         std::end(kv_cache_detail::kKvTypes);
}

std::string kv_type_name(Type t) {
  std::string s = type_name(t);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Type parse_kv_type(std::string_view name, const char* flag) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string known;
  for (Type t : kv_cache_detail::kKvTypes) {
    if (kv_type_name(t) == lower) return t;
    known += (known.empty() ? "" : ", ") + kv_type_name(t);
  }
  throw Error(strfmt("%s: unknown KV cache type '%.*s' (one of %s)", flag, static_cast<int>(name.size()), name.data(),
                     known.c_str()));
}

size_t kv_row_bytes(Type t, int64_t width) { return row_bytes(t, width); }

void check_kv_head_dim(Type t, int64_t head_dim, const char* what) {
  if (!is_kv_type(t)) throw Error(strfmt("%s: %s is not a KV cache type", what, type_name(t)));
  if (head_dim % block_size(t) != 0) {
    throw Error(strfmt("%s: a %s cache needs heads of a multiple of %lld values; this model's heads have %lld "
                       "(use f16, bf16 or f32)",
                       what, kv_type_name(t).c_str(), static_cast<long long>(block_size(t)),
                       static_cast<long long>(head_dim)));
  }
}

void KvRows::allocate(int n_layers, int n_ctx, int64_t width, int64_t head_dim, Type t) {
  type_ = t;
  n_layers_ = n_layers;
  n_ctx_ = n_ctx;
  width_ = width;
  head_dim_ = head_dim;
  row_bytes_ = width > 0 ? kv_row_bytes(t, width) : 0;
  size_t total = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(n_layers) * static_cast<size_t>(n_ctx), row_bytes_, &total) ||
      total > (size_t(1) << 60)) {
    throw Error(strfmt("a context of %d positions needs a KV cache larger than 2^60 bytes (lower the context size)", n_ctx));
  }
  try {
    buf_ = storage::AlignedBuffer(std::max<size_t>(total, 1), 64);
  } catch (const std::exception&) {  // std::bad_alloc, or les::Error from a failed mapping
    throw Error(strfmt("cannot allocate the KV cache: %.1f MiB for a context of %d positions (lower the context size)",
                       static_cast<double>(total) / (1 << 20), n_ctx));
  }
  // A large buffer is a fresh anonymous mapping (zeros, faulted in on first write); a small one
  // comes from the allocator and is zeroed here.
  if (buf_.capacity() < storage::AlignedBuffer::kHugeBufferBytes) std::memset(buf_.data(), 0, buf_.capacity());
}

void KvRows::write(int layer, int pos0, const float* rows, int n) {
  uint8_t* dst = row(layer, pos0);
  if (type_ == Type::F32) {
    std::memcpy(dst, rows, static_cast<size_t>(n) * row_bytes_);
    return;
  }
  const KernelTable& kt = kernels();
  // f16, bf16 and q8_0: the activation converters are llama.cpp's from_float for these types; the
  // 4- and 5-bit types and iq4_nl: its reference quantizers (no importance).
  const QuantizeFn q = (type_ == Type::F16 || type_ == Type::BF16 || type_ == Type::Q8_0)
                           ? kt.quantize[static_cast<uint32_t>(type_)]
                           : nullptr;
  for (int i = 0; i < n; ++i) {
    const float* x = rows + static_cast<size_t>(i) * static_cast<size_t>(width_);
    uint8_t* y = dst + static_cast<size_t>(i) * row_bytes_;
    if (q) {
      q(x, y, width_);
    } else {
      quantize_row_ref(type_, x, y, width_, nullptr);
    }
  }
}

KvView KvRows::view(int layer) const {
  KvView v;
  v.data = buf_.data() + static_cast<size_t>(layer) * static_cast<size_t>(n_ctx_) * row_bytes_;
  v.row_bytes = row_bytes_;
  v.head_bytes = head_dim_ > 0 ? kv_row_bytes(type_, head_dim_) : 0;
  v.type = type_;
  return v;
}

}  // namespace les
