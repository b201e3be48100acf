// The MoE layer as a GPU operation, whatever implements it: one call's operands as views of the caller's
// device memory, and the interface that the fused MegaMoE layer (megamoe.hpp) and the unfused baseline
// (baseline/unfused.hpp) both satisfy, so that a framework's op and `xstage moe check` / `bench` run either.
//
// Layouts (docs/MOE.md), all row-major:
//   tokens       [T_s][h]                bf16   this rank's tokens this call (T_s <= T)
//   topk_ids     [T_s][k]                int32  global expert ids (router output)
//   topk_weights [T_s][k]                fp32
//   W1           [E_local][2·h_inter][h] bf16   tile-interleaved rows: stored row n·b_n + c is logical row
//                                               l1_logical_row(n, c, b_n, h_inter) (gate rows [0, h_inter),
//                                               up rows [h_inter, 2·h_inter)), so every b_n-column block of
//                                               the Linear-1 output holds b_n/2 gate and the matching b_n/2 up columns
//   W2           [E_local][h][h_inter]   bf16
//   out          [T_s][h]                bf16
// For fp8_e4m3 problems (W8A8, docs/MOE.md "fp8 W8A8") W1 / W2 hold e4m3 codes in the same stored row order,
// quantized 128×128 from the bf16 weights above, with fp32 scales in quantize.hpp's weight-scale layout,
// experts stacked (expert e's W1 block-row b is scale row e·(2·h_inter/128) + b):
//   W1_scales    [E_local·2·h_inter/128][round_up(h/128, 4)]        fp32
//   W2_scales    [E_local·h/128][round_up(h_inter/128, 4)]          fp32
// Tokens stay bf16 for every dtype: each implementation quantizes them 1×128 inside its forward
// (quantize_device.hpp), which is part of the layer's time, as in real fp8 MoE dispatch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace xstage::moe {

// One call's operands (nothing owned): what every implementation's enqueue() takes.
struct MoeLayerViews {
  int tokens = 0;                          // T_s <= T rows of tokens / topk used this call
  const void* tokens_bf16 = nullptr;       // [T_s][h] bf16 (quantized 1×128 inside the call for fp8)
  const std::int32_t* topk_ids = nullptr;  // [T_s][k] global expert ids
  const float* topk_weights = nullptr;     // [T_s][k]
  const void* W1 = nullptr;                // [E_local][2·h_inter][h], packed (weights.hpp), bf16 or e4m3 codes
  const void* W2 = nullptr;                // [E_local][h][h_inter]
  const float* W1_scales = nullptr;        // fp8 only (the scale layout above)
  const float* W2_scales = nullptr;
  void* out_bf16 = nullptr;                // [T_s][h] bf16
};

// What every implementation of the layer provides.
//   enqueue()  the whole layer on `stream`, operands as views. The fused layer never synchronises the host
//              (so a framework can overlap it, and CUDA graphs can capture it); the unfused baseline reads
//              the exchanged counts on the host, as its users' layers do, and says so.
//   poll()     non-blocking; reports what the device found in earlier calls, once each. InputError: router
//              ids were dropped (out of range, or repeated in a token's top-k; the message counts them and
//              names the first), and the layer goes on: later calls with good ids are correct. PlatformError:
//              a failure that leaves the layer's state unknown (a device-side wait that timed out, a missing
//              peer) has ended it; the message says how to recover. After a stream synchronisation it covers
//              every call up to it.
class MoeLayerImpl {
 public:
  virtual ~MoeLayerImpl() = default;
  virtual void enqueue(const MoeLayerViews& views, cudaStream_t stream) = 0;
  virtual void poll() {}
  virtual std::string name() const = 0;
};

}  // namespace xstage::moe
