// llama.cpp reference for the qwen35moe MTP (NextN) head, linked against node-llama-cpp's prebuilt
// libllama (the same llama.cpp build the other references use). For one token sequence x_0..x_{N-1}:
// the target's logits and post-output-norm hidden states h_p, then the MTP context's catch-up batch
// (x_p, h_{p-1}) at positions 0..N-1 (h_{-1} = 0): its logits and hidden states.
// Output (float32, little-endian): target logits [N][V], h [N][E], MTP logits [N][V], MTP h [N][E].
// usage: mtp_ref MODEL OUT TOKEN...
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"

// Declared in llama.cpp's src/llama-ext.h (exported with C++ linkage by this build).
void llama_set_embeddings_nextn(struct llama_context* ctx, bool value, bool masked);
float* llama_get_embeddings_nextn(struct llama_context* ctx);

static void die(const char* msg) {
  std::fprintf(stderr, "mtp_ref: %s\n", msg);
  std::exit(1);
}

int main(int argc, char** argv) {
  if (argc < 4) die("usage: mtp_ref MODEL OUT TOKEN...");
  std::vector<llama_token> toks;
  for (int i = 3; i < argc; ++i) toks.push_back(std::atoi(argv[i]));
  const int N = static_cast<int>(toks.size());
  ggml_backend_load_all_from_path(BACKEND_DIR);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.load_mtp = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) die("cannot load the model");
  const int E = llama_model_n_embd(model);
  const int V = llama_vocab_n_tokens(llama_model_get_vocab(model));

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* tgt = llama_init_from_model(model, cp);
  if (!tgt) die("cannot create the target context");
  llama_set_embeddings_nextn(tgt, true, false);
  llama_batch b = llama_batch_init(N, 0, 1);
  for (int i = 0; i < N; ++i) {
    b.token[i] = toks[i];
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = N;
  if (llama_decode(tgt, b) != 0) die("target decode failed");
  std::vector<float> out;
  for (int i = 0; i < N; ++i) {
    const float* l = llama_get_logits_ith(tgt, i);
    out.insert(out.end(), l, l + V);
  }
  const float* h = llama_get_embeddings_nextn(tgt);
  if (!h) die("no nextn embeddings from the target");
  std::vector<float> hs(h, h + static_cast<size_t>(N) * E);
  out.insert(out.end(), hs.begin(), hs.end());

  llama_context_params cd = cp;
  cd.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
  llama_context* dft = llama_init_from_model(model, cd);
  if (!dft) die("cannot create the MTP context");
  llama_set_embeddings_nextn(dft, true, true);
  llama_batch m = llama_batch_init(N, E, 1);
  m.token = static_cast<llama_token*>(std::malloc(sizeof(llama_token) * N));
  for (int i = 0; i < N; ++i) {
    m.token[i] = toks[i];
    m.pos[i] = i;
    m.n_seq_id[i] = 1;
    m.seq_id[i][0] = 0;
    m.logits[i] = 1;
    if (i == 0) std::memset(m.embd, 0, sizeof(float) * E);
    else std::memcpy(m.embd + static_cast<size_t>(i) * E, hs.data() + static_cast<size_t>(i - 1) * E, sizeof(float) * E);
  }
  m.n_tokens = N;
  if (llama_decode(dft, m) != 0) die("MTP decode failed");
  for (int i = 0; i < N; ++i) {
    const float* l = llama_get_logits_ith(dft, i);
    out.insert(out.end(), l, l + V);
  }
  const float* hm = llama_get_embeddings_nextn(dft);
  if (!hm) die("no nextn embeddings from the MTP context");
  out.insert(out.end(), hm, hm + static_cast<size_t>(N) * E);
  FILE* f = std::fopen(argv[2], "wb");
  if (!f || std::fwrite(out.data(), sizeof(float), out.size(), f) != out.size()) die("cannot write the output");
  std::fclose(f);
  llama_batch_free(m);  // frees m.token too
  llama_batch_free(b);
  llama_free(dft);
  llama_free(tgt);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
