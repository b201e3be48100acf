#include <cuda_bf16.h>

#include "attention/reference.hpp"
#include "common/cuda_check.hpp"
#include "common/launch.cuh"

namespace xstage::attention {
namespace {

constexpr int kThreads = 128;

__device__ float block_reduce(float x, bool is_max, float* scratch) {
  for (int off = 16; off > 0; off /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, off);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[warp] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) x = is_max ? fmaxf(x, scratch[w]) : x + scratch[w];
  return x;
}

// blockIdx = (query row, head, batch).
__global__ void __launch_bounds__(kThreads) reference_attention_kernel(FlashFwdProblem p, const __nv_bfloat16* q,
                                                                        const __nv_bfloat16* k,
                                                                        const __nv_bfloat16* v,
                                                                        const int32_t* seqlen_k_per_batch, float* o,
                                                                        float* lse) {
  __shared__ float q_row[128];
  __shared__ float p_chunk[kThreads];
  __shared__ float scratch[kThreads / 32];
  const int m = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int d = p.head_dim;
  const int seqlen_k = seqlen_k_per_batch ? clamp_seqlen_k(seqlen_k_per_batch[b], p.seqlen_k) : p.seqlen_k;
  for (int c = threadIdx.x; c < d; c += kThreads) q_row[c] = __bfloat162float(q[bmhd_offset(p.q, b, m, h, c)]);
  __syncthreads();

  auto score = [&](int n) {
    const __nv_bfloat16* k_row = k + bmhd_offset(p.k, b, n, h, 0);
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc = fmaf(q_row[c], __bfloat162float(k_row[c]), acc);
    return acc * p.softmax_scale;
  };

  // Pass 1: the row maximum.
  float mx = -INFINITY;
  for (int n = threadIdx.x; n < seqlen_k; n += kThreads) mx = fmaxf(mx, score(n));
  mx = block_reduce(mx, true, scratch);

  // Pass 2: probabilities of kThreads keys at a time, then thread c accumulates output column c.
  float sum = 0.f, acc = 0.f;
  for (int n0 = 0; n0 < seqlen_k; n0 += kThreads) {
    const int n = n0 + threadIdx.x;
    const float pr = n < seqlen_k ? expf(score(n) - mx) : 0.f;
    sum += pr;
    __syncthreads();
    p_chunk[threadIdx.x] = pr;
    __syncthreads();
    if (threadIdx.x < d) {
      const int count = min(kThreads, seqlen_k - n0);
      for (int j = 0; j < count; ++j) {
        acc = fmaf(p_chunk[j], __bfloat162float(v[bmhd_offset(p.v, b, n0 + j, h, threadIdx.x)]), acc);
      }
    }
  }
  sum = block_reduce(sum, false, scratch);
  if (threadIdx.x < d) o[((int64_t(b) * p.seqlen_q + m) * p.heads + h) * d + threadIdx.x] = acc / sum;
  if (threadIdx.x == 0) lse[lse_offset(p.heads, p.seqlen_q, b, h, m)] = mx + logf(sum);
}

}  // namespace

void reference_attention_gpu(FlashFwdArgs const& args, float* o_ref, float* lse_ref, cudaStream_t stream) {
  const FlashFwdProblem& p = args.problem;
  const dim3 grid(p.seqlen_q, p.heads, p.batch);
  launch_kernel(reference_attention_kernel, grid, kThreads, 0, stream, p, static_cast<const __nv_bfloat16*>(args.q),
                                                            static_cast<const __nv_bfloat16*>(args.k),
                                                            static_cast<const __nv_bfloat16*>(args.v), args.seqlen_k_per_batch,
                                                            o_ref, lse_ref);
}

}  // namespace xstage::attention
