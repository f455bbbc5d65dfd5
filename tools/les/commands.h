// Subcommands of the `les` program. Each parses its own flags and returns an exit code;
// les::Error escapes to main, which prints it.
#pragma once

namespace les::cli {

int cmd_run(int argc, char** argv);
int cmd_logits(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_pack(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_imatrix(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_probe(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_trace(int argc, char** argv);
int cmd_image_embed(int argc, char** argv);

}  // namespace les::cli
