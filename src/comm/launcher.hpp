// One process per GPU. `xstage <command> --gpus N` starts N local ranks of itself; the same binary also
// runs under external launchers (torchrun, Slurm) that set RANK / WORLD_SIZE / LOCAL_RANK /
// MASTER_ADDR / MASTER_PORT.
#pragma once

#include <optional>
#include <string>

namespace xstage::comm {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};

// The rank environment set by a launcher (ours or an external one), or nullopt if none is set.
// Throws InputError if the variables are present but inconsistent (e.g. RANK >= WORLD_SIZE).
std::optional<RankEnv> rank_env_from_environment();

// Re-executes this program as `gpus` local ranks (one process each, environment as above), waits for
// all of them, and returns the exit status to use: 0 if every rank succeeded, otherwise the first
// failing rank's status. If one rank fails, the others are given `grace_seconds` and then terminated,
// so a crashed peer never leaves the job hanging.
int run_local_ranks(int gpus, int grace_seconds = 20);

}  // namespace xstage::comm
