// xstage: measure the X-Stage, predict its back-pressure, and say what to do about it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/run_info.hpp"

int main(int argc, char** argv) {
  xstage::set_command_line(argc, argv);
  CLI::App app{
      "xstage — X-Stage calibration and Burst–Gap planning for GPU-initiated remote stores.\n"
      "  calibrate  measure T_iss0, R and Q of one-sided NVLink stores on this machine\n"
      "  plan       predict back-pressure for a burst pattern or a fused kernel\n"
      "  attention  Hopper FlashAttention forward: correctness check and benchmark\n"
      "  moe        expert-parallel MoE layer (unfused NCCL + cuBLAS baseline): check and benchmark"};
  app.require_subcommand(1);
  xstage::cli::add_calibrate_command(app);
  xstage::cli::add_plan_command(app);
  xstage::cli::add_attention_command(app);
  xstage::cli::add_moe_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help exits 0; every usage error (unknown option, a value outside its set) is bad input: exit 2,
    // as for InputError, instead of CLI11's own codes (105, 106, ...).
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const xstage::ExitStatus& e) {
    return e.code();
  } catch (const xstage::InputError& e) {
    std::fprintf(stderr, "xstage: error: %s\n", e.what());
    return 2;
  } catch (const xstage::PlatformError& e) {
    std::fprintf(stderr, "xstage: error: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xstage: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
