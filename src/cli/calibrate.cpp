// `xstage calibrate`: measure the X-Stage of this machine's NVLink remote stores and fit M_X.
//
// Without RANK/WORLD_SIZE in the environment it starts --gpus local ranks of itself (one process per
// GPU); under torchrun/Slurm it runs as the rank it is given. Rank 0 fits, writes and reports.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "calibration/fit.hpp"
#include "calibration/sweep.hpp"
#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "cli/shipped_files.hpp"
#include "comm/launcher.hpp"
#include "comm/runtime.hpp"
#include "common/error.hpp"
#include "common/run_info.hpp"
#include "model/platform.hpp"

namespace xstage::cli {

namespace {

struct CalibrateArgs {
  int gpus = 0;  // 0: all visible
  bool quick = false;
  bool verify = false;
  bool plots = true;
  std::string pairing = "ring";
  std::string paths = "st_global_16B,tma_bulk";
  std::string K_fit, K_heldout, B_kib;
  std::string out_dir = "xstage-calibration";
  std::string platform_out;
};

double finite_or(double v, double fallback) { return std::isfinite(v) ? v : fallback; }

void print_summary(const calibration::SweepResult& sweep, const std::map<model::StorePath, calibration::FitReport>& fits,
                   const CalibrateArgs& args, int world) {
  std::printf("\nxstage calibrate: %s x%d, %s pairing, SM clock %.0f MHz after warm-up, sweep %.1f s\n",
              sweep.device.value("gpu", "GPU").c_str(), world, args.pairing.c_str(), sweep.warm_clock_mhz,
              sweep.seconds);
  for (const auto& [path, fit] : fits) {
    const auto& t = fit.triple;
    std::printf("\n  store path %-14s R = %.0f GB/s (R / wall-clock rate = %.3f)\n", model::to_string(path),
                t.R_bytes_per_ns, fit.R_over_wall_median);
    std::printf("    T_iss0 (no back-pressure):");
    for (const auto& p : t.T_iss0)
      if (p.B_bytes == 32768) std::printf("  K=%d: %.2f us", p.K, p.T_iss0_ns / 1000.0);
    std::printf("   (B = 32 KiB)\n    Q(K) (outstanding capacity):");
    for (const auto& q : t.Q) std::printf("  K=%d: %.2f MiB", q.K, q.Q_bytes / 1048576.0);
    std::printf("\n    held-out K, no refit: period |err| median %.1f%%, issue |err| median %.1f%%"
                "   (completion-coupled G+V/R: %.1f%%)\n",
                100 * fit.period_err_heldout_median, 100 * fit.issue_err_heldout_median,
                100 * fit.period_err_completion_coupled_median);
    std::printf("      on the back-pressured branch (G < G*): period %.1f%%, issue %.1f%%\n",
                100 * fit.period_err_heldout_backpressured_median, 100 * fit.issue_err_heldout_backpressured_median);
    std::printf("    local-memory control flatness over G: %.1f%%\n", 100 * finite_or(fit.local_control_flatness, 0));
    for (const auto& w : fit.warnings) std::printf("    warning: %s\n", w.c_str());
  }
  if (args.verify)
    std::printf("\n  verify: %.1f MiB checked at the receivers, %lld words wrong\n",
                sweep.verified_bytes / 1048576.0, static_cast<long long>(sweep.mismatched_words));
}

void run_rank(const comm::RankEnv& env, const CalibrateArgs& args) {
  calibration::SweepOptions opt;
  opt.quick = args.quick;
  opt.verify = args.verify;
  opt.pairing = args.pairing == "one-way"     ? comm::Pairing::one_way
                : args.pairing == "all-peers" ? comm::Pairing::all_peers
                                              : comm::Pairing::ring;
  opt.paths.clear();
  for (const std::string& name : split_list(args.paths, "--paths")) opt.paths.push_back(model::store_path_from_string(name));
  if (!args.K_fit.empty()) opt.K_fit = calibration::parse_int_list(args.K_fit, "--K");
  if (!args.K_heldout.empty()) opt.K_heldout = calibration::parse_int_list(args.K_heldout, "--heldout-K");
  if (!args.B_kib.empty())
    for (int b : calibration::parse_int_list(args.B_kib, "--B-kib")) opt.B_bytes.push_back(static_cast<std::int64_t>(b) * 1024);

  comm::Runtime rt(env);
  const bool lead = rt.rank() == 0;
  const bool tty = isatty(STDERR_FILENO);
  auto progress = [&](const std::string& line) {
    if (!lead) return;
    std::fprintf(stderr, tty ? "\r\033[Kcalibrate: %s" : "calibrate: %s\n", line.c_str());
  };
  const calibration::SweepResult sweep = calibration::run_calibration_sweep(rt, opt, progress);
  if (lead && tty) std::fprintf(stderr, "\n");
  if (!lead) return;

  // Fit each store path; held-out K are the ones the sweep kept out of every fit.
  model::PlatformModel platform;
  platform.provisional = false;
  platform.provenance = sweep.device;
  platform.provenance["gpu_count"] = rt.world_size();
  platform.provenance["pairing"] = args.pairing;
  platform.provenance["date"] = utc_timestamp();
  platform.provenance["command"] = command_line();
  platform.provenance["sm_clock_mhz"] = sweep.warm_clock_mhz;
  platform.provenance["sweep_seconds"] = sweep.seconds;
  std::map<model::StorePath, calibration::FitReport> fits;
  for (auto path : opt.paths) {
    fits[path] = calibration::fit_platform_triple(sweep.samples, path, sweep.grids.at(path).K_heldout);
    platform.store_paths[path] = fits[path].triple;
  }

  ensure_directory(args.out_dir);
  const std::string platform_path = args.out_dir + "/platform.json";
  const std::string samples_path = args.out_dir + "/samples.csv";
  model::write_platform_file(platform_path, platform);
  if (!args.platform_out.empty()) model::write_platform_file(args.platform_out, platform);
  calibration::write_samples_csv(samples_path, sweep.samples);
  nlohmann::json report = {{"command", command_line()}, {"date", utc_timestamp()}, {"device", sweep.device},
                           {"world_size", rt.world_size()}, {"pairing", args.pairing}, {"quick", args.quick},
                           {"sweep_seconds", sweep.seconds}, {"warm_clock_mhz", sweep.warm_clock_mhz},
                           {"samples", sweep.samples.size()}};
  if (args.verify) report["verify"] = {{"bytes_checked", sweep.verified_bytes}, {"words_wrong", sweep.mismatched_words}};
  for (const auto& [path, fit] : fits) {
    report["fits"][model::to_string(path)] = {
        {"R_bytes_per_ns", fit.triple.R_bytes_per_ns},
        {"R_over_wall_median", fit.R_over_wall_median},
        {"period_err_heldout_median", fit.period_err_heldout_median},
        {"issue_err_heldout_median", fit.issue_err_heldout_median},
        {"period_err_heldout_backpressured_median", fit.period_err_heldout_backpressured_median},
        {"issue_err_heldout_backpressured_median", fit.issue_err_heldout_backpressured_median},
        {"period_err_fit_median", fit.period_err_fit_median},
        {"issue_err_fit_median", fit.issue_err_fit_median},
        {"period_err_completion_coupled_median", fit.period_err_completion_coupled_median},
        {"local_control_flatness", fit.local_control_flatness},
        {"warnings", fit.warnings}};
  }
  write_json_file(args.out_dir + "/report.json", report);
  print_summary(sweep, fits, args, rt.world_size());

  if (args.plots) {
    const std::string cmd = "python3 '" + shipped_file("tools/calibration/plot.py") + "' --samples '" + samples_path +
                            "' --platform '" + platform_path + "' --out '" + args.out_dir + "/plots'";
    if (std::system(cmd.c_str()) != 0)
      std::fprintf(stderr, "xstage: warning: plotting failed (needs python3 with matplotlib); the data is in %s\n",
                   args.out_dir.c_str());
  }
  std::printf("\n  wrote %s, %s, %s/report.json%s\n", platform_path.c_str(), samples_path.c_str(),
              args.out_dir.c_str(), args.plots ? ", plots/" : "");
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure T_iss0, R and Q of one-sided NVLink remote stores (paper §3) and write a platform file.\n"
      "Starts one process per GPU itself, or runs under torchrun/Slurm (RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "MASTER_ADDR, MASTER_PORT).");
  add_integer(cmd, "--gpus", args->gpus, 2, 1024, "local GPUs to use (default: all visible; at least 2)");
  cmd->add_flag("--quick", args->quick, "a fast check on trimmed grids (about 15 s)");
  cmd->add_flag("--verify", args->verify, "check that every remote burst's bytes arrive intact at the peer");
  cmd->add_option("--pairing", args->pairing,
                  "ring: every rank stores to the next one at once; one-way: rank 0 to rank 1 only;\n"
                  "all-peers: every rank stores to all others at once, producers spread over the peers")
      ->check(CLI::IsMember({"ring", "one-way", "all-peers"}));
  cmd->add_option("--paths", args->paths, "store paths to calibrate: st_global_16B,tma_bulk");
  cmd->add_option("--K", args->K_fit, "producer counts for the fits, e.g. 16,33,66,132 (default: from the SM count)");
  cmd->add_option("--heldout-K", args->K_heldout, "producer counts kept out of the fits and only predicted");
  cmd->add_option("--B-kib", args->B_kib, "bytes per producer per burst, in KiB, e.g. 4,8,16,32");
  add_path(cmd, "--out", args->out_dir, "output directory (platform.json, samples.csv, report.json, plots/)");
  add_path(cmd, "--platform-out", args->platform_out, "also write the platform file here");
  cmd->add_flag("!--no-plots", args->plots, "skip the matplotlib plots");
  cmd->callback([args] {
    // Check the lists here too, so a typo fails before any GPU work starts.
    for (const std::string& name : split_list(args->paths, "--paths"))
      with_option_name("--paths", [&] { return model::store_path_from_string(name); });
    if (!args->K_fit.empty()) calibration::parse_int_list(args->K_fit, "--K");
    if (!args->K_heldout.empty()) calibration::parse_int_list(args->K_heldout, "--heldout-K");
    if (!args->B_kib.empty()) calibration::parse_int_list(args->B_kib, "--B-kib");
    if (const auto env = comm::rank_env_from_environment()) {
      if (env->world_size < 2)
        throw PlatformError("calibrate needs at least 2 ranks (remote stores go to a peer GPU); WORLD_SIZE=" +
                            std::to_string(env->world_size));
      run_rank(*env, *args);
      return;
    }
    const int visible = comm::visible_gpu_count();
    const int gpus = args->gpus ? args->gpus : visible;
    if (gpus < 2)
      throw PlatformError("calibrate needs at least 2 GPUs joined by NVLink (remote stores go to a peer); " +
                          std::string(args->gpus ? "--gpus " + std::to_string(gpus) + " was given" :
                                                   "only 1 GPU is visible"));
    comm::require_peer_access(gpus);
    const int rc = comm::run_local_ranks(gpus);
    if (rc != 0) throw ExitStatus(rc);  // the failing rank already printed why
  });
}

}  // namespace xstage::cli
