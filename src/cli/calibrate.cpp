// placeholder: being written (issue 2)
#include "cli/commands.hpp"
namespace xstage::cli {
void add_calibrate_command(CLI::App& app) { app.add_subcommand("calibrate", "measure M_X (not yet built)"); }
}  // namespace xstage::cli
