// CPU tests of the runtime's index math and process plumbing: who stores to whom for any number of
// ranks, the launcher environment, and the NCCL-id rendezvous over loopback (no GPU needed).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "comm/launcher.hpp"
#include "comm/peer_map.hpp"
#include "comm/rendezvous.hpp"
#include "common/error.hpp"

namespace xstage::comm {
namespace {

// For every region p of every rank's buffer exactly one producer writes it, and source/target agree.
void expect_one_writer_per_region(Pairing pairing, int world, int producers) {
  for (int r = 0; r < world; ++r) {
    for (int p = 0; p < producers; ++p) {
      const int t = producer_target(pairing, r, world, p);
      if (t < 0) continue;
      EXPECT_NE(t, r) << "no self stores";
      EXPECT_LT(t, world);
      EXPECT_EQ(producer_source(pairing, t, world, p), r) << "world " << world << ", producer " << p;
    }
    for (int p = 0; p < producers; ++p) {
      const int s = producer_source(pairing, r, world, p);
      if (s >= 0) EXPECT_EQ(producer_target(pairing, s, world, p), r);
    }
  }
}

TEST(PeerMap, RingIsAPermutationWithoutSelfStoresForAnyWorld) {
  for (int world = 2; world <= 72; ++world) {
    expect_one_writer_per_region(Pairing::ring, world, 132);
    std::set<int> targets;
    for (int r = 0; r < world; ++r) targets.insert(producer_target(Pairing::ring, r, world, 0));
    EXPECT_EQ(static_cast<int>(targets.size()), world) << "every rank receives from exactly one rank";
  }
}

TEST(PeerMap, AllPeersSpreadsEveryRanksProducersOverAllOtherRanks) {
  for (int world = 2; world <= 72; ++world) {
    expect_one_writer_per_region(Pairing::all_peers, world, 132);
    for (int r = 0; r < world; ++r) {
      std::vector<int> per_peer(static_cast<std::size_t>(world), 0);
      for (int p = 0; p < 132; ++p) ++per_peer[static_cast<std::size_t>(producer_target(Pairing::all_peers, r, world, p))];
      EXPECT_EQ(per_peer[static_cast<std::size_t>(r)], 0);
      const auto [lo, hi] = std::minmax_element(per_peer.begin(), per_peer.end());
      (void)lo;
      for (int q = 0; q < world; ++q)
        if (q != r) EXPECT_LE(*hi - per_peer[static_cast<std::size_t>(q)], 1) << "balanced over peers, world " << world;
    }
  }
  for (int p = 0; p < 132; ++p)
    EXPECT_EQ(producer_target(Pairing::all_peers, 0, 2, p), producer_target(Pairing::ring, 0, 2, p)) << "N = 2: ring";
}

TEST(PeerMap, OneWayHasOneSenderAndOneReceiver) {
  for (int world : {2, 4, 8}) {
    int senders = 0, receivers = 0;
    for (int r = 0; r < world; ++r) {
      senders += stores_remotely(Pairing::one_way, r, world);
      receivers += receives_remotely(Pairing::one_way, r, world);
    }
    EXPECT_EQ(senders, 1);
    EXPECT_EQ(receivers, 1);
    expect_one_writer_per_region(Pairing::one_way, world, 132);
    EXPECT_EQ(producer_target(Pairing::one_way, 0, world, 5), 1);
    EXPECT_EQ(producer_source(Pairing::one_way, 1, world, 5), 0);
  }
  EXPECT_FALSE(stores_remotely(Pairing::ring, 0, 1)) << "a single rank has no peer";
}

struct ScopedEnv {
  std::vector<std::string> names;
  void set(const std::string& name, const std::string& value) {
    ::setenv(name.c_str(), value.c_str(), 1);
    names.push_back(name);
  }
  ~ScopedEnv() {
    for (const auto& n : names) ::unsetenv(n.c_str());
  }
};

TEST(RankEnv, AbsentWhenNoLauncherSetIt) {
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  EXPECT_FALSE(rank_env_from_environment().has_value());
}

TEST(RankEnv, ReadsTorchrunStyleVariables) {
  ScopedEnv env;
  env.set("RANK", "5");
  env.set("WORLD_SIZE", "8");
  env.set("LOCAL_RANK", "1");
  env.set("MASTER_ADDR", "10.1.2.3");
  env.set("MASTER_PORT", "29600");
  const auto e = rank_env_from_environment();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->master_addr, "10.1.2.3");
  EXPECT_EQ(e->master_port, 29600);
}

TEST(RankEnv, InconsistentVariablesAreInputErrors) {
  {
    ScopedEnv env;
    env.set("RANK", "8");
    env.set("WORLD_SIZE", "8");
    EXPECT_THROW(rank_env_from_environment(), InputError);
  }
  {
    ScopedEnv env;
    env.set("RANK", "0");
    EXPECT_THROW(rank_env_from_environment(), InputError) << "RANK without WORLD_SIZE";
  }
  {
    ScopedEnv env;
    env.set("RANK", "zero");
    env.set("WORLD_SIZE", "2");
    EXPECT_THROW(rank_env_from_environment(), InputError);
  }
  {
    ScopedEnv env;
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "2");
    env.set("MASTER_PORT", "70000");
    EXPECT_THROW(rank_env_from_environment(), InputError);
  }
}

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(Rendezvous, RankZeroHandsItsBlobToEveryRank) {
  constexpr int kWorld = 8;
  const int port = free_loopback_port();
  std::array<std::array<char, 128>, kWorld> blobs{};
  for (int i = 0; i < 128; ++i) blobs[0][i] = static_cast<char>(i * 7 + 3);  // what rank 0 holds
  std::vector<std::thread> ranks;
  std::array<std::string, kWorld> errors;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      RankEnv env;
      env.rank = r;
      env.world_size = kWorld;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      try {
        broadcast_from_rank0(env, blobs[r].data(), blobs[r].size(), 20);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(blobs[r], blobs[0]) << "rank " << r;
  }
}

TEST(Rendezvous, AMissingRankZeroTimesOutWithAClearMessage) {
  RankEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = free_loopback_port();  // nobody listens
  char blob[16];
  try {
    broadcast_from_rank0(env, blob, sizeof blob, 1);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0 at 127.0.0.1:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xstage::comm
