#include "comm/rendezvous.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.hpp"

namespace xstage::comm {

namespace {

using Clock = std::chrono::steady_clock;

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

std::string where(const RankEnv& env) { return env.master_addr + ":" + std::to_string(env.master_port); }

bool resolve(const RankEnv& env, sockaddr_in& out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(env.master_addr.c_str(), std::to_string(env.master_port).c_str(), &hints, &res) != 0 || !res)
    return false;
  std::memcpy(&out, res->ai_addr, sizeof out);
  ::freeaddrinfo(res);
  return true;
}

void send_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) throw Error("rendezvous: connection to a peer rank broke while sending");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void recv_all(int fd, void* data, std::size_t size, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || ::poll(&pfd, 1, static_cast<int>(left)) <= 0)
      throw Error("rendezvous: timed out waiting for rank 0 to send the NCCL id");
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n <= 0) throw Error("rendezvous: rank 0 closed the connection early");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace

void broadcast_from_rank0(const RankEnv& env, void* blob, std::size_t size, int timeout_seconds) {
  if (env.world_size == 1) return;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_seconds);
  sockaddr_in addr{};
  if (!resolve(env, addr)) throw Error("rendezvous: cannot resolve MASTER_ADDR '" + env.master_addr + "'");

  if (env.rank == 0) {
    Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
    const int one = 1;
    ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener.fd, env.world_size) != 0)
      throw Error("rendezvous: rank 0 cannot listen on " + where(env) + ": " + std::strerror(errno) +
                  " (is MASTER_PORT in use?)");
    for (int accepted = 1; accepted < env.world_size; ++accepted) {
      pollfd pfd{listener.fd, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || ::poll(&pfd, 1, static_cast<int>(left)) <= 0)
        throw Error("rendezvous: rank 0 timed out on " + where(env) + " after " + std::to_string(accepted - 1) +
                    " of " + std::to_string(env.world_size - 1) + " ranks connected");
      Fd peer(::accept(listener.fd, nullptr, nullptr));
      if (peer.fd < 0) throw Error("rendezvous: accept failed on " + where(env));
      send_all(peer.fd, blob, size);
    }
    return;
  }

  // Other ranks: connect (rank 0 may not be listening yet), then receive.
  while (true) {
    Fd sock(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(sock.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      recv_all(sock.fd, blob, size, deadline);
      return;
    }
    if (Clock::now() > deadline)
      throw Error("rendezvous: rank " + std::to_string(env.rank) + " could not reach rank 0 at " + where(env) +
                  " within " + std::to_string(timeout_seconds) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace xstage::comm
