#include "comm/runtime.hpp"

#include <cstdlib>
#include <cstring>

#include "comm/rendezvous.hpp"
#include "common/cuda_check.hpp"
#include "common/error.hpp"
#include "common/nccl_check.hpp"

namespace xstage::comm {

int visible_gpu_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || count == 0)
    throw PlatformError("no CUDA GPU found on this machine (" + std::string(cudaGetErrorString(err)) +
                        "); this command needs GPUs joined by NVLink");
  XSTAGE_CUDA_CHECK(err);
  return count;
}

void require_peer_access(int gpus) {
  const int count = visible_gpu_count();
  if (gpus > count)
    throw PlatformError("asked for " + std::to_string(gpus) + " GPUs but only " + std::to_string(count) +
                        " are visible (check CUDA_VISIBLE_DEVICES)");
  for (int a = 0; a < gpus; ++a) {
    for (int b = 0; b < gpus; ++b) {
      if (a == b) continue;
      int can = 0;
      XSTAGE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can)
        throw PlatformError("GPU " + std::to_string(a) + " cannot load/store GPU " + std::to_string(b) +
                            "'s memory (no peer access): remote stores need GPUs in one NVLink domain");
    }
  }
}

Runtime::Runtime(const RankEnv& env) : env_(env) {
  const int count = visible_gpu_count();
  if (env_.local_rank >= count)
    throw PlatformError("rank " + std::to_string(env_.rank) + " wants GPU " + std::to_string(env_.local_rank) +
                        " but only " + std::to_string(count) + " GPUs are visible");
  device_ = env_.local_rank;
  XSTAGE_CUDA_CHECK(cudaSetDevice(device_));
  if (const char* lws = std::getenv("LOCAL_WORLD_SIZE"); lws && env_.world_size > 1)
    require_peer_access(std::atoi(lws));
  ncclUniqueId id{};
  if (env_.rank == 0) id = new_unique_id();
  broadcast_from_rank0(env_, &id, sizeof id);
  init_communicator(id);
}

Runtime::Runtime(const ncclUniqueId& id, int rank, int world_size, int device) {
  XSTAGE_REQUIRE(world_size >= 1 && rank >= 0 && rank < world_size,
                 "rank " + std::to_string(rank) + " of a job of " + std::to_string(world_size) + " ranks does not exist");
  const int count = visible_gpu_count();
  if (device < 0 || device >= count)
    throw PlatformError("rank " + std::to_string(rank) + " wants GPU " + std::to_string(device) + " but only " +
                        std::to_string(count) + " GPUs are visible");
  env_.rank = rank;
  env_.world_size = world_size;
  env_.local_rank = device;
  device_ = device;
  XSTAGE_CUDA_CHECK(cudaSetDevice(device_));
  init_communicator(id);
}

ncclUniqueId Runtime::new_unique_id() {
  ncclUniqueId id{};
  XSTAGE_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

void Runtime::init_communicator(const ncclUniqueId& id) {
  XSTAGE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  XSTAGE_NCCL_CHECK(ncclCommInitRank(&comm_, env_.world_size, id, env_.rank));
  lsa_size_ = ncclTeamLsa(comm_).nRanks;
  if (lsa_size_ != env_.world_size) {
    // The destructor does not run for a constructor that throws: release what exists so far here.
    ncclCommDestroy(comm_);
    comm_ = nullptr;
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
    throw PlatformError("only " + std::to_string(lsa_size_) + " of " + std::to_string(env_.world_size) +
                        " ranks are load/store reachable from rank " + std::to_string(env_.rank) +
                        " (NCCL's LSA team): xstage's one-sided stores need all ranks in one NVLink domain");
  }
  scratch_bytes_ = 1 << 16;
  XSTAGE_CUDA_CHECK(cudaMalloc(&scratch_, scratch_bytes_ * (env_.world_size + 1)));
}

Runtime::~Runtime() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (scratch_) cudaFree(scratch_);
  if (comm_) {
    ncclCommFinalize(comm_);
    ncclCommDestroy(comm_);
  }
  if (stream_) cudaStreamDestroy(stream_);
}

void Runtime::barrier() {
  XSTAGE_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_));
  XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::vector<std::byte> Runtime::all_gather_bytes(const void* data, std::size_t size) {
  std::vector<std::byte> out(size * env_.world_size);
  auto* send = static_cast<std::byte*>(scratch_);
  std::byte* recv = send + scratch_bytes_;
  for (std::size_t done = 0; done < size; done += scratch_bytes_ / env_.world_size) {
    // Chunks of at most scratch/world bytes, so the receive side fits the scratch buffer.
    const std::size_t chunk = std::min(size - done, scratch_bytes_ / env_.world_size);
    XSTAGE_CUDA_CHECK(cudaMemcpyAsync(send, static_cast<const std::byte*>(data) + done, chunk,
                                      cudaMemcpyHostToDevice, stream_));
    XSTAGE_NCCL_CHECK(ncclAllGather(send, recv, chunk, ncclUint8, comm_, stream_));
    for (int r = 0; r < env_.world_size; ++r)
      XSTAGE_CUDA_CHECK(cudaMemcpyAsync(out.data() + r * size + done, recv + r * chunk, chunk,
                                        cudaMemcpyDeviceToHost, stream_));
    XSTAGE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return out;
}

SymmetricBuffer::SymmetricBuffer(Runtime& rt, std::size_t bytes) : rt_(rt), bytes_(bytes) {
  XSTAGE_NCCL_CHECK(ncclMemAlloc(&ptr_, bytes_));
  XSTAGE_NCCL_CHECK(ncclCommWindowRegister(rt_.comm(), ptr_, bytes_, &window_, NCCL_WIN_COLL_SYMMETRIC));
}

SymmetricBuffer::~SymmetricBuffer() {
  if (window_) ncclCommWindowDeregister(rt_.comm(), window_);
  if (ptr_) ncclMemFree(ptr_);
}

void* SymmetricBuffer::peer_pointer(int peer, std::size_t offset) const {
  if (peer < 0 || peer >= rt_.world_size())
    throw Error("peer " + std::to_string(peer) + " is not a rank of this job");
  if (offset >= bytes_) throw Error("offset beyond the end of the symmetric buffer");
  return resolve_lsa_pointer(window_, offset, peer, rt_.stream());
}

DeviceComm::DeviceComm(Runtime& rt, int lsa_barrier_count) : rt_(rt) {
  ncclDevCommRequirements reqs;
  std::memset(&reqs, 0, sizeof reqs);  // 2.28 has no initializer macro
  reqs.lsaBarrierCount = lsa_barrier_count;
  XSTAGE_NCCL_CHECK(ncclDevCommCreate(rt_.comm(), &reqs, &dev_comm_));
}

DeviceComm::~DeviceComm() { ncclDevCommDestroy(rt_.comm(), &dev_comm_); }

}  // namespace xstage::comm
