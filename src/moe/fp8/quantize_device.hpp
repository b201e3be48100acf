// fp8 W8A8 quantization on the device, bit for bit the host quantizers of quantize.hpp (same fp8.hpp rules:
// amax per block, fp8::block_scale with IEEE divisions, fp8::quantize_value with one fp32 multiply). The
// fused and the unfused layer quantize their tokens inside the timed forward with quantize_rows_fp8;
// make_layer_inputs quantizes the expert weights once with quantize_weights_fp8.
//
// Inputs must be finite: the device does not check (a block holding inf/NaN gets an unspecified scale and
// codes; the host quantizers throw instead). Both functions only enqueue work on `stream`; a bad shape,
// pitch or alignment throws InputError before anything is enqueued.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xstage::moe {

// 1×128 quantization of `rows` rows of `cols` bf16 values (cols % 128 == 0), bit-identical to the host
// quantize_activations (fp8.hpp rules: amax per (row, 128-col block), fp8::block_scale, fp8::quantize_value).
// Row r of x starts at x + r * x_pitch (elements); its codes at codes + r * code_pitch (bytes);
// the scale of (row r, block kb) is written to scales[r * scale_row_stride + kb * scale_block_stride].
// Alignment: x 8 B and x_pitch a multiple of 4 elements; codes 4 B and code_pitch a multiple of 4 bytes
// (one warp per (row, block), 4 values per lane: one 8-byte load and one 4-byte store per lane).
// quantize.hpp's activation layout is scale_row_stride = 1, scale_block_stride = round_up(rows, 4).
void quantize_rows_fp8(const __nv_bfloat16* x, std::int64_t x_pitch, int rows, int cols, std::uint8_t* codes,
                       std::int64_t code_pitch, float* scales, std::int64_t scale_row_stride,
                       std::int64_t scale_block_stride, cudaStream_t stream);

// 128×128 quantization of a row-major [n][k] bf16 matrix (n, k % 128 == 0) into codes [n][k] and scales
// [n/128][round_up(k/128, 4)] (quantize.hpp's weight layout; padding entries 1.0f), bit-identical to the host
// quantize_weights. Experts stacked along n quantize as one matrix when each expert's rows are a multiple of
// 128 (no block straddles two experts).
void quantize_weights_fp8(const __nv_bfloat16* w, int n, int k, std::uint8_t* codes, float* scales, cudaStream_t stream);

}  // namespace xstage::moe
