/* xstage's C ABI: the functions that bindings (the Python package's ctypes layer, or any other language)
 * call. Plain C, no exceptions, no C++ types, no CUDA headers, so that one build of libxstage_c.so loads
 * into any process: any Python version, any PyTorch build (cudart is linked statically and every symbol
 * but the xstage_* functions below is hidden).
 *
 * Conventions
 *   - Every operation returns an int status: XSTAGE_OK (0), XSTAGE_ERROR_INPUT (2, bad arguments: fix the
 *     call), XSTAGE_ERROR_PLATFORM (3, the machine cannot run it: no GPU, wrong GPU, a CUDA error) or
 *     XSTAGE_ERROR_OTHER (1). The statuses match the `xstage` command's exit statuses.
 *   - After a non-zero status, xstage_last_error() says what was wrong, naming the argument. The message
 *     is per thread and stays valid until the thread's next xstage_* call; a call that succeeds leaves "".
 *   - Tensors cross as xstage_tensor (pointer, shape, strides in elements, dtype, device). The caller
 *     keeps ownership; nothing is retained after the call returns.
 *   - GPU work is enqueued on the caller's CUDA stream (a cudaStream_t passed as void*; NULL is the legacy
 *     default stream of the tensors' device) and is asynchronous: no host synchronisation, no allocation.
 *     Calls are safe to capture into CUDA graphs.
 *   - Each forward function has a `_trusted` twin for bindings whose tensors come from a framework's device
 *     allocator and whose stream is the framework's current stream of the tensors' device (PyTorch's ops
 *     library, src/torch_ops/): it makes every check of its twin except the per-call CUDA queries that
 *     confirm those two facts (cudaPointerGetAttributes per tensor, the stream's device), a few microseconds
 *     of host time each. Passing host memory, another device's memory or another device's stream to a
 *     `_trusted` function is undefined behaviour.
 *
 * Versioning: XSTAGE_C_ABI_VERSION changes whenever a declaration here changes layout or meaning. New
 * operations are added as new functions (look them up by name) and do not change it. Bindings check
 * xstage_abi_version() and xstage_tensor_struct_size() against what they were written for.
 *
 * Multi-GPU operations work on opaque handles with create/destroy functions: a communicator (xstage_comm,
 * from an NCCL unique id that the caller distributes), and on it the layers (xstage_ulysses, xstage_moe),
 * each of which owns its symmetric NCCL windows and is built once and called many times. Creating and
 * destroying a communicator or a layer is collective: every rank calls it, in the same order. A layer's
 * forward call only enqueues (no host synchronisation, no allocation, CUDA-graph capturable); its poll
 * function reports, without blocking, what the device found in earlier calls (a wait that timed out, bad
 * router ids).
 */
#ifndef XSTAGE_C_H_
#define XSTAGE_C_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define XSTAGE_C_API __declspec(dllexport)
#else
#define XSTAGE_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define XSTAGE_C_ABI_VERSION 2

/* Statuses returned by every operation. */
#define XSTAGE_OK 0
#define XSTAGE_ERROR_OTHER 1
#define XSTAGE_ERROR_INPUT 2
#define XSTAGE_ERROR_PLATFORM 3

/* Element types (values are part of the ABI; 0 is never valid). */
#define XSTAGE_DTYPE_BFLOAT16 1
#define XSTAGE_DTYPE_FLOAT16 2
#define XSTAGE_DTYPE_FLOAT32 3
#define XSTAGE_DTYPE_FLOAT8_E4M3 4
#define XSTAGE_DTYPE_INT32 5
#define XSTAGE_DTYPE_INT64 6
#define XSTAGE_DTYPE_UINT8 7

/* xstage_tensor.device for host memory; CUDA devices are 0, 1, ... (the CUDA runtime's ordinals). */
#define XSTAGE_DEVICE_CPU (-1)

#define XSTAGE_MAX_NDIM 8

/* A strided view of memory. shape[i] and strides[i] are meaningful for i < ndim; strides are in elements
 * (not bytes), as PyTorch's Tensor.stride(). The stride of a dimension of size 1 is ignored. */
typedef struct xstage_tensor {
  void* data;
  int64_t shape[XSTAGE_MAX_NDIM];
  int64_t strides[XSTAGE_MAX_NDIM];
  int32_t ndim;
  int32_t dtype;    /* XSTAGE_DTYPE_* */
  int32_t device;   /* CUDA device ordinal, or XSTAGE_DEVICE_CPU */
  int32_t reserved; /* set to 0 */
} xstage_tensor;

/* XSTAGE_C_ABI_VERSION of the library that was loaded. */
XSTAGE_C_API int32_t xstage_abi_version(void);

/* sizeof(xstage_tensor) in the library (bindings compare it with their own definition). */
XSTAGE_C_API size_t xstage_tensor_struct_size(void);

/* The project version, e.g. "0.1.0". */
XSTAGE_C_API const char* xstage_version(void);

/* The message of this thread's last failed call ("" if the last call succeeded). Never NULL. */
XSTAGE_C_API const char* xstage_last_error(void);

/* Whether CUDA device `device` can run xstage's kernels (they are built for sm_90a: Hopper).
 * XSTAGE_OK, or XSTAGE_ERROR_PLATFORM with a message (no driver, no such device, another architecture). */
XSTAGE_C_API int xstage_check_device(int32_t device);

/* FlashAttention forward, full (non-causal) attention:
 *   out[b, m, h, :] = softmax(softmax_scale * q[b, m, h, :] . k[b, n, h, :] over n) @ v[b, :, h, :]
 *   q, out:  [batch, seqlen_q, heads, head_dim] bfloat16
 *   k, v:    [batch, seqlen_k, heads, head_dim] bfloat16
 *   lse:     NULL, or [batch, heads, seqlen_q] float32, contiguous: the natural-log log-sum-exp of the
 *            scaled scores of each query row
 * head_dim 64 or 128; any batch, heads, seqlen_q, seqlen_k >= 1. Strides: head_dim stride 1; the batch,
 * row and head strides positive multiples of 8 elements (16 bytes); pointers 16-byte aligned. All tensors
 * on one CUDA device, which must be the stream's. `out` must not overlap q, k, v or lse. Enqueued on
 * `stream` (cudaStream_t); returns without waiting for the GPU. */
XSTAGE_C_API int xstage_flash_attention_forward(const xstage_tensor* q, const xstage_tensor* k,
                                                const xstage_tensor* v, const xstage_tensor* out,
                                                const xstage_tensor* lse, float softmax_scale, void* stream);

/* xstage_flash_attention_forward without the pointer and stream queries (Conventions: `_trusted`). */
XSTAGE_C_API int xstage_flash_attention_forward_trusted(const xstage_tensor* q, const xstage_tensor* k,
                                                        const xstage_tensor* v, const xstage_tensor* out,
                                                        const xstage_tensor* lse, float softmax_scale, void* stream);

/* xstage_flash_attention_forward with per-sequence key lengths (a key-padding mask whose kept keys come first):
 * sequence b attends to its first key_lengths[b] keys of k and v; the rest are never read.
 *   key_lengths: NULL (every key), or [batch] int32, contiguous, on the tensors' device
 * The values stay on the device (reading them would synchronise the host with the GPU), so they are not checked:
 * the kernel clamps each to [1, seqlen_k]. Otherwise as xstage_flash_attention_forward (its messages too). */
XSTAGE_C_API int xstage_flash_attention_forward_key_lengths(const xstage_tensor* q, const xstage_tensor* k,
                                                            const xstage_tensor* v, const xstage_tensor* key_lengths,
                                                            const xstage_tensor* out, const xstage_tensor* lse,
                                                            float softmax_scale, void* stream);

/* xstage_flash_attention_forward_key_lengths without the pointer and stream queries (Conventions: `_trusted`). */
XSTAGE_C_API int xstage_flash_attention_forward_key_lengths_trusted(const xstage_tensor* q, const xstage_tensor* k,
                                                                    const xstage_tensor* v, const xstage_tensor* key_lengths,
                                                                    const xstage_tensor* out, const xstage_tensor* lse,
                                                                    float softmax_scale, void* stream);

/* ----------------------------------------------------------------------------------------------------
 * Communicator: one per process and process group, over NCCL 2.28 (comm::Runtime). All ranks must be
 * load/store reachable from each other (one NVLink domain: NCCL's LSA team spans the job); otherwise
 * creation fails with XSTAGE_ERROR_PLATFORM.
 * -------------------------------------------------------------------------------------------------- */

#define XSTAGE_COMM_UNIQUE_ID_BYTES 128 /* sizeof(ncclUniqueId) */

typedef struct xstage_comm xstage_comm;

/* A new NCCL unique id (ncclGetUniqueId: opens the bootstrap socket of rank 0). One rank makes it and
 * hands the 128 bytes to every rank (e.g. a torch.distributed broadcast). */
XSTAGE_C_API int xstage_comm_unique_id(uint8_t out[XSTAGE_COMM_UNIQUE_ID_BYTES]);

/* Collective (every rank, blocking until all have joined): this process becomes rank `rank` of
 * `world_size` on CUDA device `device`. *out is NULL after a failure. */
XSTAGE_C_API int xstage_comm_create(const uint8_t id[XSTAGE_COMM_UNIQUE_ID_BYTES], int32_t rank,
                                    int32_t world_size, int32_t device, xstage_comm** out);

/* Any of the outputs may be NULL. lsa_size: ranks reachable by loads/stores (== world_size). */
XSTAGE_C_API int xstage_comm_info(const xstage_comm* comm, int32_t* rank, int32_t* world_size, int32_t* device,
                                  int32_t* lsa_size);

/* Collective: every rank reaches this point (blocks the host until then). */
XSTAGE_C_API int xstage_comm_barrier(xstage_comm* comm);

/* Collective. XSTAGE_ERROR_INPUT (and nothing destroyed) while layers created on it still exist: destroy
 * them first. NULL is accepted (no-op). */
XSTAGE_C_API int xstage_comm_destroy(xstage_comm* comm);

/* ----------------------------------------------------------------------------------------------------
 * Ulysses sequence-parallel attention over a communicator of P ranks (attention::UlyssesAttention): each
 * rank holds q, k, v and out as [batch, seqlen/P, heads, head_dim] bf16, densely packed (row-major,
 * contiguous), its shard of the sequence; the layer runs the pre-attention all-to-all, full (non-causal)
 * attention with softmax scale 1/sqrt(head_dim) over the whole sequence on heads/P heads, and the post-
 * attention all-to-all. `seqlen` and `heads` are the whole sequence and all heads; both must be multiples
 * of P; head_dim 64 or 128; 1 <= P <= 8.
 * -------------------------------------------------------------------------------------------------- */

#define XSTAGE_A2A_STORE_TMA 0       /* the fused epilogue stores tiles with TMA bulk copies */
#define XSTAGE_A2A_STORE_ST_GLOBAL 1 /* ... with plain st.global */

/* How a forward call runs the layer (attention::UlyssesPath; docs/ATTENTION.md): */
#define XSTAGE_ULYSSES_SERIAL 0     /* NCCL all-to-all, attention, NCCL all-to-all */
#define XSTAGE_ULYSSES_FUSED_POST 1 /* all-to-all, then attention with the post-attention all-to-all in its epilogue */
#define XSTAGE_ULYSSES_FUSED_BOTH 2 /* as FUSED_POST, and the copy engines push Q, K, V into the peers' inboxes
                                       chunk by chunk while the attention kernel runs: no pre-attention all-to-all */

typedef struct xstage_ulysses xstage_ulysses;

/* The XSTAGE_ULYSSES_* value of a path name ("serial", "fused_post", "fused_both"); XSTAGE_ERROR_INPUT naming
 * the choices for any other. */
XSTAGE_C_API int xstage_ulysses_path_from_name(const char* name, int32_t* path);

/* The shape checks of xstage_ulysses_create for P = `ranks`, without a GPU or communicator. */
XSTAGE_C_API int xstage_ulysses_check_shape(int32_t batch, int32_t seqlen, int32_t heads, int32_t head_dim,
                                            int32_t ranks);

/* Collective: allocates the layer's buffers and its symmetric output windows on every rank. `timeout_s`:
 * every device-side wait gives up after it (0: 10 s). */
XSTAGE_C_API int xstage_ulysses_create(xstage_comm* comm, int32_t batch, int32_t seqlen, int32_t heads,
                                       int32_t head_dim, int32_t store_path, double timeout_s,
                                       xstage_ulysses** out);

/* The whole layer on `stream` (a stream of the communicator's device), by `path`, one of XSTAGE_ULYSSES_SERIAL,
 * XSTAGE_ULYSSES_FUSED_POST and XSTAGE_ULYSSES_FUSED_BOTH (any other value: XSTAGE_ERROR_INPUT). q, k, v, out:
 * [batch, seqlen/P, heads, head_dim] bf16, contiguous, 16-byte aligned, on the communicator's device; out must
 * not overlap the inputs. Every rank calls it with the same `path`. */
XSTAGE_C_API int xstage_ulysses_forward(xstage_ulysses* layer, const xstage_tensor* q, const xstage_tensor* k,
                                        const xstage_tensor* v, const xstage_tensor* out, int32_t path,
                                        void* stream);

/* Non-blocking: XSTAGE_ERROR_PLATFORM naming the failed device-side wait of an earlier call, else OK. */
XSTAGE_C_API int xstage_ulysses_poll(const xstage_ulysses* layer);

/* Collective; waits for the device to finish with the layer's buffers first. NULL is accepted. */
XSTAGE_C_API int xstage_ulysses_destroy(xstage_ulysses* layer);

/* ----------------------------------------------------------------------------------------------------
 * The fused MegaMoE layer over a communicator of P ranks (moe::FusedMoeLayer), expert-parallel: rank r
 * holds experts [r*E/P, (r+1)*E/P). Per call each rank passes its tokens (any count up to max_tokens,
 * zero included) with their router output, and gets
 *   out[t] = sum_j topk_weights[t][j] * W2[e] (silu(W1_gate[e] x_t) * (W1_up[e] x_t)),  e = topk_ids[t][j]
 * Operands (row-major, contiguous, on the communicator's device, 16-byte aligned):
 *   tokens        [T_s][hidden]                   bf16 (fp8 layers quantize them 1x128 inside the call)
 *   topk_ids      [T_s][top_k]                    int32, global expert ids in [0, experts)
 *   topk_weights  [T_s][top_k]                    float32
 *   w1            [experts/P][2*inter][hidden]    bf16, or float8_e4m3 codes: packed with
 *                                                 xstage_moe_pack_w1 for the layer's tile_n (then quantized)
 *   w2            [experts/P][hidden][inter]      bf16 or float8_e4m3 codes
 *   w1_scales     [experts/P*2*inter/128][round_up(hidden/128, 4)]  float32, fp8 only (else NULL)
 *   w2_scales     [experts/P*hidden/128][round_up(inter/128, 4)]    float32, fp8 only (else NULL)
 *   out           [T_s][hidden]                   bf16
 * -------------------------------------------------------------------------------------------------- */

#define XSTAGE_MOE_SCHEDULE_INTERLEAVED 0 /* the C default (a zeroed config) */
#define XSTAGE_MOE_SCHEDULE_EXPERT_WAVE 1
#define XSTAGE_MOE_SCHEDULE_AUTO 2        /* schedule, wave_lag, cluster_n, cluster_m chosen for the layer when it is
                                             created (docs/MOE.md, "Choosing the schedule per layer"); those
                                             fields are then ignored. The Python package's default */

typedef struct xstage_moe_config {
  int32_t experts;      /* E, all ranks together (a multiple of P) */
  int32_t top_k;        /* experts per token, 1..E */
  int32_t hidden;       /* h */
  int32_t inter;        /* h_inter (Linear-1 gives 2*inter: gate, then up) */
  int32_t max_tokens;   /* T: tokens per rank per call, at most (buffers are sized by it) */
  int32_t dtype;        /* XSTAGE_DTYPE_BFLOAT16, or XSTAGE_DTYPE_FLOAT8_E4M3 (W8A8, 128x128 weight scales) */
  int32_t tile_n;       /* b_n, 128 or 256; 0: xstage_moe_default_tile_n. w1 must be packed for it */
  int32_t schedule;     /* XSTAGE_MOE_SCHEDULE_* */
  int32_t wave_lag;     /* expert-wave schedule: 0 = waves, 1 = pipelined waves */
  int32_t wave_experts; /* expert-wave size; 0: heuristic */
  int32_t lead_rows;    /* interleaved schedule's lead D; 0: heuristic */
  int32_t cluster_n;    /* CTAs sharing activations along N: 1, 2, or 0 = automatic */
  int32_t cluster_m;    /* 1, or 2: M-pairs */
  int32_t reserved;     /* set to 0 */
  double capacity_slack; /* dispatch capacity = expected load x slack; 0: worst case (never overflows) */
  double timeout_s;      /* every device-side wait; 0: 10 s */
} xstage_moe_config;

typedef struct xstage_moe xstage_moe;

/* sizeof(xstage_moe_config) in the library. */
XSTAGE_C_API size_t xstage_moe_config_struct_size(void);

/* The tile width the layer uses by default for a shape (256 where it fits, else 128). */
XSTAGE_C_API int xstage_moe_default_tile_n(int32_t dtype, int32_t hidden, int32_t inter, int32_t* out);

/* The schedule named `name` ("auto", "interleaved", "expert_wave" or "pipelined_waves"; docs/MOE.md) as the
 * config's schedule and wave_lag fields. XSTAGE_ERROR_INPUT listing the names for any other. */
XSTAGE_C_API int xstage_moe_schedule_from_name(const char* name, int32_t* schedule, int32_t* wave_lag);

/* The checks of xstage_moe_create that need no GPU, for a job of `ranks` ranks: everything about the
 * configuration but what depends on the device (the SM count's parity for CTA pairs). */
XSTAGE_C_API int xstage_moe_check_config(const xstage_moe_config* config, int32_t ranks);

/* Collective: allocates the layer's symmetric window on every rank. */
XSTAGE_C_API int xstage_moe_create(xstage_comm* comm, const xstage_moe_config* config, xstage_moe** out);

/* The whole layer on `stream` (a stream of the communicator's device); every rank calls it once per step
 * (a rank without tokens passes T_s = 0). Scales: NULL for bf16 layers. */
XSTAGE_C_API int xstage_moe_forward(xstage_moe* layer, const xstage_tensor* tokens, const xstage_tensor* topk_ids,
                                    const xstage_tensor* topk_weights, const xstage_tensor* w1,
                                    const xstage_tensor* w2, const xstage_tensor* w1_scales,
                                    const xstage_tensor* w2_scales, const xstage_tensor* out, void* stream);

/* xstage_moe_forward without the pointer and stream queries (Conventions: `_trusted`). */
XSTAGE_C_API int xstage_moe_forward_trusted(xstage_moe* layer, const xstage_tensor* tokens, const xstage_tensor* topk_ids,
                                            const xstage_tensor* topk_weights, const xstage_tensor* w1,
                                            const xstage_tensor* w2, const xstage_tensor* w1_scales,
                                            const xstage_tensor* w2_scales, const xstage_tensor* out, void* stream);

/* Non-blocking; reports what the device found in earlier calls, each once:
 *   XSTAGE_ERROR_INPUT     router ids were dropped (outside [0, experts), or repeated in a token's top-k): the
 *                          message counts them and names the first. The dropped pairs add nothing to their
 *                          tokens' outputs; the layer goes on, and later calls with good ids are correct.
 *   XSTAGE_ERROR_PLATFORM  a failure that leaves the layer's state unknown (a device-side wait that timed
 *                          out, a missing peer, a capacity overflow) has ended the layer: it refuses further
 *                          calls; destroy it on every rank and create a new one.
 *   XSTAGE_OK              neither. */
XSTAGE_C_API int xstage_moe_poll(const xstage_moe* layer);

/* Non-blocking: *ended = 1 once a failure of an earlier call has ended the layer (xstage_moe_poll says which),
 * else 0. */
XSTAGE_C_API int xstage_moe_ended(const xstage_moe* layer, int32_t* ended);

/* Collective; waits for the device to finish with the layer's buffers first. NULL is accepted. */
XSTAGE_C_API int xstage_moe_destroy(xstage_moe* layer);

/* Linear-1 weights as a PyTorch MoE stores them -> the layer's tile-interleaved order for tile width
 * `tile_n`: logical and packed [E_local][2*inter][hidden] bf16, contiguous, distinct, on one device; logical
 * holds each expert's gate rows [0, inter) then its up rows [inter, 2*inter). Enqueued on `stream`. */
XSTAGE_C_API int xstage_moe_pack_w1(const xstage_tensor* logical, const xstage_tensor* packed, int32_t tile_n,
                                    void* stream);

/* 128x128-block fp8 (e4m3) quantization of a row-major [n][k] bf16 matrix (n, k multiples of 128):
 * codes [n][k] float8_e4m3 (or uint8), scales [n/128][round_up(k/128, 4)] float32 (the layer's weight-scale
 * layout; padding entries 1.0). Quantize the packed W1 as [E_local*2*inter][hidden] and W2 as
 * [E_local*hidden][inter]. Inputs must be finite. Enqueued on `stream`. */
XSTAGE_C_API int xstage_moe_quantize_weights_fp8(const xstage_tensor* w, const xstage_tensor* codes,
                                                 const xstage_tensor* scales, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* XSTAGE_C_H_ */
