// Subcommands under construction in this build report so instead of doing nothing.
#include "commands.h"
#include "les/util/error.h"

namespace les::cli {

int cmd_synth(int, char**) { throw Error("synth: not built yet in this revision"); }

}  // namespace les::cli
