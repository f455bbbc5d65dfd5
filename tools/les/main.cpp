// `les`: one program, subcommands in llama.cpp's conventions.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "les/util/error.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"run", les::cli::cmd_run, "generate text from a prompt (streams tokens, prints tok/s)"},
    {"logits", les::cli::cmd_logits, "print per-position argmax/top-K logits as JSON for given tokens"},
    {"inspect", les::cli::cmd_inspect, "show a GGUF model's architecture, tensors, types and sizes"},
    {"synth", les::cli::cmd_synth, "write a random-weight model of any supported shape"},
    {"quantize", les::cli::cmd_quantize, "convert a model's weights to another tensor type"},
    {"pack", les::cli::cmd_pack, "repack experts as one 4 KiB-aligned extent each (one read per expert)"},
    {"verify", les::cli::cmd_verify, "check a packed model's structure and every expert's checksum"},
    {"perplexity", les::cli::cmd_perplexity, "perplexity on a text; KL divergence against a base model or logits file"},
    {"imatrix", les::cli::cmd_imatrix, "compute an importance matrix over a text (llama.cpp's imatrix format)"},
    {"serve", les::cli::cmd_serve, "an OpenAI-compatible HTTP server (chat and text completions, streamed or not)"},
    {"chat", les::cli::cmd_chat, "an interactive chat in the terminal (the model's chat template, streamed replies)"},
    {"trace", les::cli::cmd_trace, "record a model's routing over a text as .npy files (cache replays, bench_cache_policy)"},
    {"image-embed", les::cli::cmd_image_embed, "encode an image with a MiniCPM-V vision encoder (mmproj): raw float rows as llama.cpp's mtmd orders them"},
    {"plan", les::cli::cmd_plan, "what running a model here will look like: memory, speed and its bounds, what would raise it"},
    {"probe", les::cli::cmd_probe, "measure the disk with a model's expert reads (cached per device; ceilings, --read-chunk auto)"},
    {"bench", les::cli::cmd_bench, "the published staging (baseline -> +lookahead -> ... -> +speculation) on this machine"},
};

void print_usage() {
  std::fprintf(stderr, "usage: les <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(stderr, "\nles <command> --help shows a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) == 0) {
      try {
        return c.fn(argc - 2, argv + 2);
      } catch (const les::Error& e) {
        std::fprintf(stderr, "les %s: error: %s\n", c.name, e.what());
        return 1;
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "les %s: error: out of memory\n", c.name);
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "les %s: error: %s\n", c.name, e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "les: unknown command '%s'\n\n", argv[1]);
  print_usage();
  return 2;
}
