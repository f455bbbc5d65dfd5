#include "les/quant/types.h"

#include <cctype>

#include "les/quant/blocks.h"
#include "les/util/error.h"

namespace les {
namespace {

struct Entry {
  uint32_t id;
  TypeInfo info;
};

// Immutable table of the supported types, by GGUF id. Activation-only types (Q8_1, Q8_K) and the
// integer types are not weight types.
constexpr Entry kTypes[] = {
    {0, {"f32", 1, 4, true}},
    {1, {"f16", 1, 2, true}},
    {2, {"q4_0", QK4_0, sizeof(block_q4_0), true}},
    {3, {"q4_1", QK4_1, sizeof(block_q4_1), true}},
    {6, {"q5_0", QK5_0, sizeof(block_q5_0), true}},
    {7, {"q5_1", QK5_1, sizeof(block_q5_1), true}},
    {8, {"q8_0", QK8_0, sizeof(block_q8_0), true}},
    {9, {"q8_1", QK8_1, sizeof(block_q8_1), false}},
    {10, {"q2_K", QK_K, sizeof(block_q2_K), true}},
    {11, {"q3_K", QK_K, sizeof(block_q3_K), true}},
    {12, {"q4_K", QK_K, sizeof(block_q4_K), true}},
    {13, {"q5_K", QK_K, sizeof(block_q5_K), true}},
    {14, {"q6_K", QK_K, sizeof(block_q6_K), true}},
    {15, {"q8_K", QK_K, sizeof(block_q8_K), false}},
    {16, {"iq2_xxs", QK_K, sizeof(block_iq2_xxs), true}},
    {17, {"iq2_xs", QK_K, sizeof(block_iq2_xs), true}},
    {18, {"iq3_xxs", QK_K, sizeof(block_iq3_xxs), true}},
    {19, {"iq1_s", QK_K, sizeof(block_iq1_s), true}},
    {20, {"iq4_nl", QK4_NL, sizeof(block_iq4_nl), true}},
    {21, {"iq3_s", QK_K, sizeof(block_iq3_s), true}},
    {22, {"iq2_s", QK_K, sizeof(block_iq2_s), true}},
    {23, {"iq4_xs", QK_K, sizeof(block_iq4_xs), true}},
    {24, {"i8", 1, 1, false}},
    {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},
    {29, {"iq1_m", QK_K, sizeof(block_iq1_m), true}},
    {30, {"bf16", 1, 2, true}},
    {34, {"tq1_0", QK_K, sizeof(block_tq1_0), true}},
    {35, {"tq2_0", QK_K, sizeof(block_tq2_0), true}},
    {39, {"mxfp4", QK_MXFP4, sizeof(block_mxfp4), true}},
    {40, {"nvfp4", QK_NVFP4, sizeof(block_nvfp4), true}},
};

const Entry* find_entry(uint32_t id) {
  for (const Entry& e : kTypes) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<TypeInfo> type_info(uint32_t id) {
  const Entry* e = find_entry(id);
  if (!e) return std::nullopt;
  return e->info;
}

const TypeInfo& info(Type t) {
  const Entry* e = find_entry(static_cast<uint32_t>(t));
  LES_ASSERT(e != nullptr);
  return e->info;
}

const char* type_name(Type t) { return info(t).name; }

std::optional<Type> parse_type(std::string_view name) {
  for (const Entry& e : kTypes) {
    if (iequal(name, e.info.name)) return static_cast<Type>(e.id);
  }
  return std::nullopt;
}

size_t row_bytes(Type t, int64_t n) {
  const TypeInfo& ti = info(t);
  LES_ASSERT(n >= 0 && n % ti.block_size == 0);
  return static_cast<size_t>(n / ti.block_size) * ti.block_bytes;
}

}  // namespace les
