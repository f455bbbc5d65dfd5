// Architecture-specific configuration keys, one reader per architecture (config_<arch>.cpp).
// Each is called by config_from_gguf after the common keys (layers, heads, experts, RoPE and YaRN)
// and before the feed-forward widths; each throws les::Error naming the key it finds missing,
// mistyped or inconsistent.
#pragma once

#include <string>

#include "les/gguf/gguf.h"
#include "les/model/config.h"

namespace les {

void read_deepseek2(const gguf::File& f, const std::string& path, ModelConfig& c);
void read_glm4moe(const gguf::File& f, const std::string& path, ModelConfig& c);
void read_gpt_oss(const gguf::File& f, const std::string& path, ModelConfig& c);
void read_qwen3next(const gguf::File& f, const std::string& path, ModelConfig& c);

// Hybrid Gated DeltaNet / gated attention models (qwen35moe, qwen3next): the trunk/MTP split
// (nextn_predict_layers), the DeltaNet sizes (ssm.*) and the layer pattern
// (attention.recurrent_layers, else full_attention_interval).
void read_hybrid_layers(const gguf::File& f, const std::string& path, ModelConfig& c);

// Shared key readers (config.cpp): an integer key in [lo, hi] (a per-layer array must be
// uniform), required or with a default.
int config_int(const gguf::File& f, const std::string& key, const std::string& path, int64_t lo, int64_t hi);
int config_int_or(const gguf::File& f, const std::string& key, const std::string& path, int def, int64_t lo, int64_t hi);

}  // namespace les
