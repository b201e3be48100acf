// placeholder: being written (issue 4)
#include "cli/commands.hpp"
namespace xstage::cli {
void add_attention_command(CLI::App& app) { app.add_subcommand("attention", "FlashAttention forward (not yet built)"); }
}  // namespace xstage::cli
