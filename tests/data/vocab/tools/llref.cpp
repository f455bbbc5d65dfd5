// Reference tokenizer driver: links llama.cpp's own libllama (the prebuilt one shipped with
// node-llama-cpp in tools/llamacpp-ref) and prints, for each input of a .inp file (inputs separated
// by "\n__ggml_vocab_test__\n", raw bytes), one line:
//   <ids separated by spaces> TAB <hex of llama_detokenize(ids, remove_special=false, unparse_special=parse_special)>
// or "EXC" when llama.cpp throws (it does for code points above U+10FFFF).
// usage: llref model.gguf inputs.inp add_special(0/1) parse_special(0/1)
#include "llama.h"
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
int main(int argc, char** argv) {
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  auto mp = llama_model_default_params(); mp.vocab_only = true;
  llama_model* m = llama_model_load_from_file(argv[1], mp);
  if (!m) return 1;
  const llama_vocab* v = llama_model_get_vocab(m);
  bool as = argv[3][0] == '1', ps = argv[4][0] == '1';
  std::ifstream in(argv[2], std::ios::binary); std::stringstream ss; ss << in.rdbuf(); std::string raw = ss.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inp; size_t pos = 0;
  while (true) { size_t nx = raw.find(sep, pos); if (nx == std::string::npos) { inp.push_back(raw.substr(pos)); break; } inp.push_back(raw.substr(pos, nx - pos)); pos = nx + sep.size(); }
  for (auto& s : inp) {
    std::vector<llama_token> t(s.size() + 8);
    int n;
    try { n = llama_tokenize(v, s.data(), s.size(), t.data(), t.size(), as, ps); if (n < 0) { t.resize(-n); n = llama_tokenize(v, s.data(), s.size(), t.data(), t.size(), as, ps); } } catch (...) { printf("EXC\n"); continue; }
    for (int i = 0; i < n; ++i) printf(i ? " %d" : "%d", t[i]);
    std::string d(s.size() * 16 + 256, '\0');
    int nd = llama_detokenize(v, t.data(), n, d.data(), d.size(), false, ps);
    printf("\t");
    for (int i = 0; i < nd; ++i) printf("%02x", (unsigned char)d[i]);
    printf("\n");
  }
}
