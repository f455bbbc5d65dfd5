// attention_kernels.h's portable compile (the build's baseline ISA) and the choice among the ISAs.
#define LES_ATTN_NS attn_portable
#include "les/model/attention_kernels_impl.h"

#include "les/quant/kernels.h"

namespace les {

#if defined(__x86_64__)
namespace attn_avx2 {
const AttnKernels& table();
}
namespace attn_avx512 {
const AttnKernels& table();
}
#endif

const AttnKernels& attn_kernels() {
#if defined(__x86_64__)
  switch (kernels().isa) {
    case Isa::avx512: return attn_avx512::table();
    case Isa::avx2:
    case Isa::avx_vnni: return attn_avx2::table();
    default: break;
  }
#endif
  return attn_portable::table();
}

}  // namespace les
