// qwen3next (Qwen3-Next-80B-A3B): configuration keys and tensor table.
#include "les/model/config_arch.h"
#include "les/model/model_loader.h"

namespace les {

void read_qwen3next(const gguf::File&, const std::string& path, ModelConfig&) {
  throw Error(path + ": architecture qwen3next is not supported yet");
}

void ModelLoader::load_qwen3next_mixer(int, LayerWeights&) {}

}  // namespace les
