#include "comm/launcher.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"

namespace xstage::comm {

namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0') throw InputError(std::string("environment variable ") + name + "='" + v + "' is not an integer");
  return static_cast<int>(x);
}

// A free TCP port on the loopback interface for the rendezvous of locally spawned ranks.
int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error("cannot create a socket to pick a rendezvous port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw Error("cannot bind a loopback socket to pick a rendezvous port");
  }
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::vector<std::string> own_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

}  // namespace

std::optional<RankEnv> rank_env_from_environment() {
  const auto rank = env_int("RANK");
  const auto world = env_int("WORLD_SIZE");
  if (!rank && !world) return std::nullopt;
  if (!rank || !world) throw InputError("RANK and WORLD_SIZE must be set together");
  RankEnv env;
  env.rank = *rank;
  env.world_size = *world;
  env.local_rank = env_int("LOCAL_RANK").value_or(*rank);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) env.master_addr = a;
  env.master_port = env_int("MASTER_PORT").value_or(29500);
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size)
    throw InputError("RANK=" + std::to_string(env.rank) + " is not in [0, WORLD_SIZE=" +
                     std::to_string(env.world_size) + ")");
  if (env.local_rank < 0) throw InputError("LOCAL_RANK must be >= 0");
  if (env.master_port <= 0 || env.master_port > 65535) throw InputError("MASTER_PORT must be in 1..65535");
  return env;
}

int run_local_ranks(int gpus, int grace_seconds) {
  XSTAGE_REQUIRE(gpus >= 1, "--gpus must be at least 1 (got " + std::to_string(gpus) + ")");
  const std::vector<std::string> args = own_argv();
  if (args.empty()) throw Error("cannot read /proc/self/cmdline to start the ranks");
  const std::string port = std::to_string(pick_free_port());

  std::vector<pid_t> children;
  for (int r = 0; r < gpus; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw Error("fork failed while starting rank " + std::to_string(r));
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(gpus).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(gpus).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      std::vector<char*> cargv;
      for (const auto& a : args) cargv.push_back(const_cast<char*>(a.c_str()));
      cargv.push_back(nullptr);
      ::execv("/proc/self/exe", cargv.data());
      std::perror("xstage: execv");
      ::_exit(127);
    }
    children.push_back(pid);
  }

  // Reap ranks; on the first failure give the rest a grace period, then terminate them.
  int first_failure = 0;
  std::vector<bool> done(children.size(), false);
  size_t remaining = children.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  int signals_sent = 0;
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t i = 0; i < children.size(); ++i) {
        if (children[i] != pid) continue;
        done[i] = true;
        --remaining;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && first_failure == 0) {
          first_failure = code;
          std::fprintf(stderr, "xstage: rank %zu exited with status %d; stopping the other ranks\n", i, code);
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_seconds);
        }
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      // First SIGTERM, then (5 s later) SIGKILL for ranks stuck in a driver call.
      for (size_t i = 0; i < children.size(); ++i)
        if (!done[i]) ::kill(children[i], signals_sent == 0 ? SIGTERM : SIGKILL);
      ++signals_sent;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return first_failure;
}

}  // namespace xstage::comm
