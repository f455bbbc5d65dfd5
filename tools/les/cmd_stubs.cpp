// Subcommands under construction in this build report so instead of doing nothing.
#include "commands.h"
#include "les/util/error.h"

namespace les::cli {


}  // namespace les::cli
