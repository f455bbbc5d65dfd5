// gpt-oss (gpt-oss-20b / 120b): configuration keys and tensor table.
#include "les/model/config_arch.h"
#include "les/model/model_loader.h"

namespace les {

void read_gpt_oss(const gguf::File&, const std::string& path, ModelConfig&) {
  throw Error(path + ": architecture gpt-oss is not supported yet");
}

void ModelLoader::load_gpt_oss_attention(int, LayerWeights&) {}

}  // namespace les
