// placeholder: being written (issue 3)
#include "cli/commands.hpp"
namespace xstage::cli {
void add_plan_command(CLI::App& app) { app.add_subcommand("plan", "predict back-pressure (not yet built)"); }
}  // namespace xstage::cli
