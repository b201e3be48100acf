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
 *
 * Versioning: XSTAGE_C_ABI_VERSION changes whenever a declaration here changes layout or meaning. New
 * operations are added as new functions (look them up by name) and do not change it. Bindings check
 * xstage_abi_version() and xstage_tensor_struct_size() against what they were written for.
 *
 * Planned operations (not here yet), each a further function of the same shape: Ulysses attention over a
 * communicator, the MegaMoE layer, a communicator built from an NCCL unique id (an opaque handle type
 * with create/destroy functions).
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

#define XSTAGE_C_ABI_VERSION 1

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* XSTAGE_C_H_ */
