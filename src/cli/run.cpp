// The whole `xstage` command line (main.cpp calls it; tests/fuzz runs it in forked children).
#include "cli/run.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/run_info.hpp"

namespace {

// CLI11 reports a word that names no subcommand as a missing subcommand ("A subcommand is required"), since it
// checks requirements before leftovers. The deepest command that was recognized, and the first word it
// could not place, say what was really wrong.
std::string unknown_subcommand(const CLI::App& app) {
  const CLI::App* at = &app;
  std::string path = app.get_name();
  for (;;) {
    const auto parsed = at->get_subcommands();
    if (parsed.empty()) break;
    at = parsed.front();
    path += " " + at->get_name();
  }
  const std::vector<std::string> left = app.remaining(true);  // a word a subcommand passed up is its parent's
  std::string known;
  for (const CLI::App* sub : at->get_subcommands({}))
    if (!sub->get_name().empty()) known += (known.empty() ? "" : ", ") + sub->get_name();
  if (left.empty() || known.empty()) return {};
  return "'" + path + "' has no subcommand '" + left.front() + "' (it has: " + known + ")";
}

}  // namespace

namespace xstage::cli {

int run(int argc, char** argv) {
  xstage::set_command_line(argc, argv);
  CLI::App app{
      "xstage — X-Stage calibration and Burst–Gap planning for GPU-initiated remote stores.\n"
      "  calibrate  measure T_iss0, R and Q of one-sided NVLink stores on this machine\n"
      "  plan       predict back-pressure for a burst pattern or a fused kernel\n"
      "  attention  Hopper FlashAttention forward and the Ulysses layer (serial, fused_post, fused_both): check and benchmark\n"
      "  moe        expert-parallel MoE layer (the fused MegaMoE kernel and the unfused NCCL + cuBLAS baseline): check and benchmark",
      "xstage"};
  // Set before the subcommands exist: they copy it. Every usage error reads like every other input error.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("xstage: error: ") + e.what() + "\nRun with --help for more information.\n";
  });
  app.set_version_flag("--version", std::string("xstage ") + XSTAGE_VERSION);
  app.require_subcommand(1);
  add_calibrate_command(app);
  add_plan_command(app);
  add_attention_command(app);
  add_moe_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and --version exit 0; every usage error (unknown option or subcommand, a value outside its set) is
    // bad input: exit 2, as for InputError, instead of CLI11's own codes (105, 106, ...).
    if (dynamic_cast<const CLI::RequiredError*>(&e)) {
      const std::string unknown = unknown_subcommand(app);
      if (!unknown.empty()) {
        std::fprintf(stderr, "xstage: error: %s\n", unknown.c_str());
        return 2;
      }
    }
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const xstage::ExitStatus& e) {
    return e.code();
  } catch (const xstage::InputError& e) {
    std::fprintf(stderr, "xstage: error: %s\n", e.what());
    return 2;
  } catch (const xstage::PlatformError& e) {
    std::fprintf(stderr, "xstage: error: %s\n", e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "xstage: error: out of memory (internal error: the input limits should have prevented it)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xstage: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace xstage::cli
