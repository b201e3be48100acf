// Each `xstage` subcommand registers itself on the top-level CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace xstage::cli {

void add_calibrate_command(CLI::App& app);  // src/cli/calibrate.cpp — measure M_X on this machine
void add_plan_command(CLI::App& app);       // src/cli/plan.cpp — Burst–Gap verdicts for a pattern or kernel
void add_attention_command(CLI::App& app);  // src/cli/attention.cpp — FlashAttention forward: check and bench
void add_ulysses_command(CLI::App& attention);  // src/cli/ulysses.cpp — `attention ulysses`: the sequence-parallel layer
void add_moe_command(CLI::App& app);        // src/cli/moe.cpp — expert-parallel MoE layer: check and bench

}  // namespace xstage::cli
