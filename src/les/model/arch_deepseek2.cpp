// deepseek2 (DeepSeek-V2/V3, Kimi-K2): configuration keys and tensor table.
#include "les/model/config_arch.h"
#include "les/model/model_loader.h"

namespace les {

void read_deepseek2(const gguf::File&, const std::string& path, ModelConfig&) {
  throw Error(path + ": architecture deepseek2 is not supported yet");
}

void ModelLoader::load_deepseek2_attention(int, LayerWeights&) {}

}  // namespace les
