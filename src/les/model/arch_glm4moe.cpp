// glm4moe (GLM-4.5/4.6, GLM-4.5-Air): configuration keys, tensor table and NextN block.
#include "les/model/config_arch.h"
#include "les/model/model_loader.h"

namespace les {

void read_glm4moe(const gguf::File&, const std::string& path, ModelConfig&) {
  throw Error(path + ": architecture glm4moe is not supported yet");
}

void ModelLoader::load_glm4moe_attention(int, LayerWeights&) {}
void ModelLoader::load_glm4moe_nextn() {}

}  // namespace les
