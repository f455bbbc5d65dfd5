// Reference dump of llama.cpp's dflash / DSpark drafter (src/models/dflash.cpp), driven the way
// common/speculative.cpp drives --spec-type draft-dspark: the target prefills a sequence with its
// layer inputs extracted, the features of positions 0..p-1 are decoded into the drafter as an
// embedding batch (KV cache injection), and one token batch [id_last, MASK...] at positions p..
// gives the drafter logits of every block slot (after the Markov head), the confidences and the
// drafted tokens (top-1 of each slot, which is llama.cpp's top-k 10 sampler's first candidate).
// The drafter's cache is then cleared (llama_memory_seq_rm) for the next case.
//
// Not part of the les build (never built in CI): build_dspark_dump.sh compiles it against a
// llama.cpp source tree and its build. Output format: tests/data/README.md, "dspark_*.bin".
//
// usage: dspark_dump TARGET.gguf DRAFTER.gguf TEXT.txt OUT.bin [--prompts N] [--full N]
//        [--features 0|1] [--gen N] [--max-prompt N] [--threads N]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama.h"
#include "llama-ext.h"

namespace {

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "dspark_dump: %s\n", m.c_str());
  std::exit(1);
}

std::string meta(const llama_model* m, const char* key, const char* def) {
  char buf[256] = {};
  if (llama_model_meta_val_str(m, key, buf, sizeof(buf)) < 0) return def;
  return buf;
}

// Held-out snippets of the second half of the text: each starts after a newline and is cut
// before a space, about 150 bytes.
std::vector<std::string> snippets(const std::string& text, int n) {
  std::vector<std::string> out;
  const size_t half = text.size() / 2;
  for (int i = 0; i < n; ++i) {
    size_t at = half + (text.size() - half) * static_cast<size_t>(i) / static_cast<size_t>(n + 1);
    at = text.find('\n', at);
    if (at == std::string::npos) break;
    ++at;
    size_t end = std::min(text.size(), at + 150);
    const size_t sp = text.rfind(' ', end);
    if (sp != std::string::npos && sp > at + 60) end = sp;
    out.push_back(text.substr(at, end - at));
  }
  return out;
}

struct Writer {
  FILE* f;
  void u32(uint32_t v) { std::fwrite(&v, 4, 1, f); }
  void i32s(const int32_t* p, size_t n) { std::fwrite(p, 4, n, f); }
  void f32s(const float* p, size_t n) { std::fwrite(p, 4, n, f); }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) die("usage: dspark_dump TARGET.gguf DRAFTER.gguf TEXT.txt OUT.bin [options]");
  int n_prompts = 8, n_full = 3, n_gen = 20, max_prompt = 40, n_threads = 2;
  bool store_features = true;
  for (int i = 5; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--prompts") n_prompts = v;
    else if (k == "--full") n_full = v;
    else if (k == "--features") store_features = v != 0;
    else if (k == "--gen") n_gen = v;
    else if (k == "--max-prompt") max_prompt = v;
    else if (k == "--threads") n_threads = v;
    else die("unknown option " + k);
  }

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* tgt = llama_model_load_from_file(argv[1], mp);
  llama_model* dft = llama_model_load_from_file(argv[2], mp);
  if (!tgt || !dft) die("cannot load the models");

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_threads = n_threads;
  cp.n_threads_batch = n_threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.no_perf = true;
  llama_context* ctx_tgt = llama_init_from_model(tgt, cp);
  llama_context_params cpd = cp;
  cpd.ctx_other = ctx_tgt;
  llama_context* ctx_dft = llama_init_from_model(dft, cpd);
  if (!ctx_tgt || !ctx_dft) die("cannot create the contexts");

  const int32_t* layers = llama_model_target_layer_ids(dft);
  const int n_layers = static_cast<int>(llama_model_target_layer_ids_n(dft));
  const int n_embd_tgt = llama_model_n_embd(tgt);
  const int n_embd_dft = llama_model_n_embd(dft);
  const int n_feat = n_layers * n_embd_tgt;
  const llama_vocab* vocab = llama_model_get_vocab(tgt);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(dft));
  const int block_size = std::atoi(meta(dft, "dflash.block_size", "16").c_str());
  const bool from_anchor = meta(dft, "dflash.sample_from_anchor", "true") == "true";
  const bool causal = meta(dft, "dflash.attention.causal", "false") == "true";
  const llama_token mask = llama_vocab_mask(llama_model_get_vocab(dft));
  // Largest draft llama.cpp allows for this drafter, and the block that yields it.
  const int n_draft = from_anchor ? block_size : block_size - 1;
  const int n_block = n_draft + (from_anchor ? 0 : 1);
  const int i_draft_beg = from_anchor ? 0 : 1;
  for (int k = 0; k < n_layers; ++k) llama_set_embeddings_layer_inp(ctx_tgt, static_cast<uint32_t>(layers[k]), true);
  llama_set_embeddings_nextn(ctx_dft, true, /*masked*/ true);
  llama_set_causal_attn(ctx_dft, causal);
  std::fprintf(stderr, "dspark_dump: layers %d, n_feat %d, vocab %d, block %d, n_draft %d, mask %d, anchor %d, causal %d\n",
               n_layers, n_feat, n_vocab, block_size, n_draft, mask, from_anchor, causal);

  std::ifstream in(argv[3], std::ios::binary);
  if (!in) die(std::string("cannot read ") + argv[3]);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<std::string> texts = snippets(ss.str(), n_prompts);

  struct Case {
    std::vector<int32_t> tokens;  // [p + 1]: the sequence up to and including id_last = tokens[p]
    std::vector<float> feats;     // [p][n_feat] (stored when full and features on)
    std::vector<float> logits;    // [n_block][n_vocab]
    std::vector<float> conf;      // [n_block]
    std::vector<int32_t> drafted; // [n_draft]
    bool full = false;
  };
  std::vector<Case> cases;

  llama_batch tb = llama_batch_init(512, 0, 1);
  llama_batch eb = llama_batch_init(512, n_feat, 1);
  for (size_t pi = 0; pi < texts.size(); ++pi) {
    std::vector<llama_token> prompt(512);
    const int n = llama_tokenize(vocab, texts[pi].c_str(), static_cast<int32_t>(texts[pi].size()), prompt.data(),
                                 512, true, false);
    if (n <= 4) die("tokenize failed");
    prompt.resize(static_cast<size_t>(std::min(n, max_prompt)));
    const int L = static_cast<int>(prompt.size());

    // Greedy continuation by the target.
    std::vector<llama_token> seq = prompt;
    llama_memory_clear(llama_get_memory(ctx_tgt), true);
    for (int g = 0; g < n_gen; ++g) {
      tb.n_tokens = 0;
      const int beg = g == 0 ? 0 : static_cast<int>(seq.size()) - 1;
      for (int i = beg; i < static_cast<int>(seq.size()); ++i) {
        tb.token[tb.n_tokens] = seq[static_cast<size_t>(i)];
        tb.pos[tb.n_tokens] = i;
        tb.n_seq_id[tb.n_tokens] = 1;
        tb.seq_id[tb.n_tokens][0] = 0;
        tb.logits[tb.n_tokens] = i + 1 == static_cast<int>(seq.size());
        tb.n_tokens++;
      }
      if (llama_decode(ctx_tgt, tb) != 0) die("target decode failed");
      const float* lg = llama_get_logits_ith(ctx_tgt, -1);
      const int nv = llama_vocab_n_tokens(vocab);
      seq.push_back(static_cast<llama_token>(std::max_element(lg, lg + nv) - lg));
    }

    // Target prefill of the whole sequence with the layer inputs extracted.
    llama_memory_clear(llama_get_memory(ctx_tgt), true);
    const int N = static_cast<int>(seq.size());
    tb.n_tokens = 0;
    for (int i = 0; i < N; ++i) {
      tb.token[i] = seq[static_cast<size_t>(i)];
      tb.pos[i] = i;
      tb.n_seq_id[i] = 1;
      tb.seq_id[i][0] = 0;
      tb.logits[i] = i + 1 == N;
    }
    tb.n_tokens = N;
    if (llama_decode(ctx_tgt, tb) != 0) die("target prefill failed");
    std::vector<float> feats(static_cast<size_t>(N) * n_feat);
    for (int k = 0; k < n_layers; ++k) {
      const float* src = llama_get_embeddings_layer_inp(ctx_tgt, static_cast<uint32_t>(layers[k]));
      if (!src) die("layer input not extracted");
      for (int i = 0; i < N; ++i) {
        std::memcpy(feats.data() + static_cast<size_t>(i) * n_feat + static_cast<size_t>(k) * n_embd_tgt,
                    src + static_cast<size_t>(i) * n_embd_tgt, sizeof(float) * static_cast<size_t>(n_embd_tgt));
      }
    }

    // Anchors: the first generated token (the first drafting round), two inside the continuation.
    const int anchors[3] = {L, L + n_gen / 3, L + 2 * n_gen / 3};
    for (int ai = 0; ai < 3; ++ai) {
      const int p = anchors[ai];
      if (p >= N) continue;
      Case c;
      c.full = ai == 0 && static_cast<int>(pi) < n_full;
      c.tokens.assign(seq.begin(), seq.begin() + p + 1);

      // Injection of positions 0..p-1 into an empty drafter cache.
      llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, 0, -1);
      eb.n_tokens = p;
      std::memcpy(eb.embd, feats.data(), sizeof(float) * static_cast<size_t>(p) * n_feat);
      for (int i = 0; i < p; ++i) {
        eb.pos[i] = i;
        eb.n_seq_id[i] = 1;
        eb.seq_id[i][0] = 0;
        eb.logits[i] = false;
      }
      if (llama_decode(ctx_dft, eb) != 0) die("drafter injection failed");

      // The block.
      tb.n_tokens = n_block;
      for (int i = 0; i < n_block; ++i) {
        tb.token[i] = i == 0 ? seq[static_cast<size_t>(p)] : mask;
        tb.pos[i] = p + i;
        tb.n_seq_id[i] = 1;
        tb.seq_id[i][0] = 0;
        tb.logits[i] = true;
      }
      if (llama_decode(ctx_dft, tb) != 0) die("drafter block decode failed");
      const float* conf = llama_get_embeddings_nextn(ctx_dft);
      for (int i = 0; i < n_block; ++i) {
        const float* lg = llama_get_logits_ith(ctx_dft, i);
        c.logits.insert(c.logits.end(), lg, lg + n_vocab);
        c.conf.push_back(conf ? conf[static_cast<size_t>(i) * n_embd_dft] : 0.0f);
        if (i >= i_draft_beg) c.drafted.push_back(static_cast<int32_t>(std::max_element(lg, lg + n_vocab) - lg));
      }
      llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, p, -1);
      if (c.full && store_features) c.feats.assign(feats.begin(), feats.begin() + static_cast<ptrdiff_t>(p) * n_feat);
      std::fprintf(stderr, "case %zu: prompt %zu, p %d, drafted", cases.size(), pi, p);
      for (int32_t t : c.drafted) std::fprintf(stderr, " %d", t);
      std::fprintf(stderr, "\n");
      cases.push_back(std::move(c));
    }
  }

  FILE* f = std::fopen(argv[4], "wb");
  if (!f) die(std::string("cannot write ") + argv[4]);
  Writer w{f};
  std::fwrite("LESDSPK1", 1, 8, f);
  w.u32(static_cast<uint32_t>(cases.size()));
  w.u32(static_cast<uint32_t>(n_vocab));
  w.u32(static_cast<uint32_t>(n_feat));
  w.u32(static_cast<uint32_t>(n_block));
  w.u32(static_cast<uint32_t>(n_draft));
  constexpr int kTop = 8;
  for (const Case& c : cases) {
    const uint32_t flags = (c.feats.empty() ? 0u : 1u) | (c.full ? 2u : 0u);
    w.u32(static_cast<uint32_t>(c.tokens.size()));
    w.u32(flags);
    w.i32s(c.tokens.data(), c.tokens.size());
    w.i32s(c.drafted.data(), c.drafted.size());
    w.f32s(c.conf.data(), c.conf.size());
    for (int i = 0; i < n_block; ++i) {  // top-8 (id, logit) per slot, best first
      const float* lg = c.logits.data() + static_cast<size_t>(i) * n_vocab;
      std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
      for (int v = 0; v < n_vocab; ++v) idx[static_cast<size_t>(v)] = v;
      std::partial_sort(idx.begin(), idx.begin() + kTop, idx.end(),
                        [&](int32_t a, int32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
      for (int k = 0; k < kTop; ++k) {
        w.i32s(&idx[static_cast<size_t>(k)], 1);
        w.f32s(&lg[idx[static_cast<size_t>(k)]], 1);
      }
    }
    if (flags & 1u) w.f32s(c.feats.data(), c.feats.size());
    if (flags & 2u) w.f32s(c.logits.data(), c.logits.size());
  }
  std::fclose(f);
  std::fprintf(stderr, "dspark_dump: %zu cases -> %s\n", cases.size(), argv[4]);

  llama_batch_free(tb);
  llama_batch_free(eb);
  llama_free(ctx_dft);
  llama_free(ctx_tgt);
  llama_model_free(dft);
  llama_model_free(tgt);
  llama_backend_free();
  return 0;
}
