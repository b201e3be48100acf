#!/usr/bin/env python3
"""The Triton fused-MoE baseline: our own implementation of the algorithm inference servers (vLLM, SGLang) run for
a MoE layer on one GPU, timed on the layers `xstage moe bench` times.

The layer (T tokens, E experts, top-k, hidden h, intermediate h_inter; out[t] = sum_j w[t,j] * W2_e SwiGLU(W1_e x_t),
e = ids[t,j]):
  1. align: the T*k (token, slot) pairs sorted by expert, each expert's run padded to BLOCK_M rows (torch ops on the
     GPU, no host synchronisation: the whole layer is captured in one CUDA graph);
  2. Linear-1 as a grouped GEMM: each program computes one BLOCK_M x BLOCK_N block of one expert's output (the
     expert looked up per M-block), gathering its A rows (the tokens) by pair index; output [T*k, 2*h_inter] bf16
     in pair order, gate columns [0, h_inter), up columns [h_inter, 2*h_inter);
  3. SwiGLU: silu(gate) * up in fp32 -> bf16, or for fp8 requantized 1x128 into e4m3 codes and fp32 scales;
  4. Linear-2, the same kernel on the activations (rows already in pair order), the fp32 result multiplied by the
     pair's router weight in the epilogue -> [T*k, h] bf16;
  5. the top-k weighted sum: the k weighted rows of each token added (fp32 accumulation, bf16 out).
fp8 W8A8 is DeepSeek-V3's recipe: e4m3 codes, one fp32 scale per 1x128 activation block (the tokens quantized
inside the layer) and per 128x128 weight block; BLOCK_K = 128, and each K block's product comes out of the tensor
core alone and is promoted into the fp32 accumulator times (activation scale x weight scale).

Block sizes (choose_blocks, one rule for both GEMMs, BLOCK_M x BLOCK_N x BLOCK_K / warps / pipeline stages) follow
the mean rows per expert r = T*k/E. The tile shapes come from the tables of tuned configurations the servers ship
for Hopper, from the layers nearest DeepSeek-V3's (neither ships one for E=256, N=2048: vLLM's tables are keyed by
the tensor-parallel shard, N=256 for DeepSeek-V3 on 8 GPUs):
  r <= 16      16 x 128 x 128 / 4 / 4: few rows per expert, the expert weights are streamed once; vLLM's H200 fp8
               table for E=256, N=256 (up to 512 tokens, r <= 16) and its H200 bf16 table for E=128, N=1024
               (16-row blocks up to 1024 tokens);
  fp8, r <= 128  64 x 128 x 128 / 4 / 4: the same vLLM fp8 table from 1024 to 4096 tokens (r = 32..128) and
               SGLang's H200 fp8 table for E=256, N=512 at 2048 and 4096 tokens (its triton_3_5_1 folder);
  fp8, r > 128   128 x 128 x 128 / 8 / 4: past those tables; the SGLang table's choice at 3072 tokens;
  bf16, r < 48   128 x 128 x 64 / 8 / 3, and r >= 48: 128 x 256 x 64 / 8 / 4: SGLang's H100 bf16 table for E=256,
               N=2688 (triton_3_5_1: 1024 tokens, and 1536 to 4096 tokens), the published bf16 layer nearest in size.
GROUP_M (M-blocks walked down one N column before the next) is 16 everywhere (the fp8 tables use 16-32): an
expert's M-blocks then read each weight tile at about the same time, from L2 after the first. `--blocks` overrides
the rule. fp8 needs BLOCK_K = 128 (one scale per K block).

CLI: random inputs with balanced routing as `xstage moe bench` draws it (src/moe/problem/routing.cpp: pair q = t*k+j
goes to perm[q mod E] of a seeded permutation, so a token's k experts are distinct and the per-expert loads differ by
at most one; router weights 0.1 + U(0,1), normalised per token), weights N(0, 1/fan_in) (fp8: quantized 128x128 on
the GPU before timing, as `xstage moe bench` does). Each layer is checked against a float32 torch reference on a
subset of tokens (rel L2; exit 1 above the tolerance, see TOLERANCE), then timed: the whole layer (fp8: with the
tokens' quantization) captured in a CUDA graph of back-to-back calls filling >= 2 ms (eager calls where capture
fails), ~1.5 s warm-up, median over trials (tools/common/timing.py). TFLOP/s = 2*T*k*3*h*h_inter / t; weight TB/s =
the bytes of the experts' weights (and scales) the layer reads / t.

    python3 tools/moe/triton_moe.py --h 7168 --h-inter 2048 --experts 256 --top-k 8 \\
        --tokens 1024,4096,8192 --dtype bf16,fp8 --trials 20 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tools/: common/
from common.timing import calls_per_timing, captured, repeat, time_in_turn, warm_up  # noqa: E402

E4M3_MAX = 448.0  # the largest finite e4m3 (OCP FP8 E4M3FN)
# A block whose amax is below this gets scale 1 (codes 0): its scale would be subnormal (docs/MOE.md, fp8 W8A8).
E4M3_MIN_AMAX = E4M3_MAX * 2.0**-126
QUANT = 128  # 1 x QUANT activation blocks, QUANT x QUANT weight blocks
_E4M3_MAX = tl.constexpr(E4M3_MAX)
_E4M3_MIN_AMAX = tl.constexpr(E4M3_MIN_AMAX)
_QUANT = tl.constexpr(QUANT)

# rel L2 of the layer against reference_layer, which rounds where the layer stores (bf16 Linear-1 output,
# activations, weighted Linear-2 rows, output; fp8 codes from the same formula). What is left is fp32 summation
# order, which flips an occasional bf16 rounding of the Linear-1 output (~1e-3); in fp8 also Hopper's fp8 tensor
# cores summing a 128-wide K block with ~14 significant bits, and an occasional requantized activation code one
# e4m3 step (6-12%) off where that moved its value across a rounding boundary. xstage's fused kernel is held
# to 1e-2 against its W8A8 reference and measured <= 5.6e-3 in fp8 (docs/MOE.md, Check); twice that for the
# second requantization point the fused kernel does not have. A wrong or misindexed scale moves the layer by
# >= 17% (docs/MOE.md), a wrong expert or token by O(1).
TOLERANCE = {"bf16": 1e-2, "fp8": 2e-2}


# ----------------------------------------------------------------------------------------------------------------
# Block sizes


@dataclass(frozen=True)
class Blocks:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    def __str__(self):
        return f"{self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} w{self.num_warps} s{self.num_stages}"


def choose_blocks(tokens: int, top_k: int, experts: int, dtype: str) -> Blocks:
    """The block sizes of both GEMMs for a layer: the rule in the module docstring (its sources there)."""
    rows = tokens * top_k / experts  # mean rows per expert
    if rows <= 16:
        return Blocks(16, 128, 128, 16, 4, 4)
    if dtype == "fp8":
        return Blocks(64, 128, 128, 16, 4, 4) if rows <= 128 else Blocks(128, 128, 128, 16, 8, 4)
    return Blocks(128, 128, 64, 16, 8, 3) if rows < 48 else Blocks(128, 256, 64, 16, 8, 4)


def parse_blocks(text: str) -> Blocks:
    """`M,N,K,GROUP_M,WARPS,STAGES` -> Blocks (ValueError naming what is wrong)."""
    parts = text.split(",")
    if len(parts) != 6 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--blocks wants six integers M,N,K,GROUP_M,WARPS,STAGES, got {text!r}")
    b = Blocks(*(int(p) for p in parts))
    for name in ("block_m", "block_n", "block_k"):
        v = getattr(b, name)
        if v < 16 or v & (v - 1):
            raise ValueError(f"--blocks: {name} must be a power of two >= 16 (tl.dot's minimum), got {v}")
    if b.group_m < 1 or b.num_warps not in (1, 2, 4, 8, 16) or b.num_stages < 1:
        raise ValueError(f"--blocks: GROUP_M >= 1, WARPS in 1..16 (a power of two) and STAGES >= 1, got {text!r}")
    return b


# ----------------------------------------------------------------------------------------------------------------
# Align: pairs sorted by expert, padded to BLOCK_M


def max_padded_rows(pairs: int, experts: int, block_m: int) -> int:
    """An upper bound of the padded rows over every routing (each expert pads < BLOCK_M rows; at most `pairs`
    experts have rows): the grid and buffers are sized by it, so nothing depends on the routing on the host."""
    return triton.cdiv(pairs + min(experts, pairs) * (block_m - 1), block_m) * block_m


def align(topk_ids: torch.Tensor, experts: int, block_m: int):
    """topk_ids [T, k] (int, each in [0, experts)) -> (sorted_pairs, block_expert, padded_rows):
      sorted_pairs [max_padded_rows] int32: the pair index t*k+j of each row, experts in order, each expert's pairs in
                   token order, each expert's run padded with T*k (no pair) to a multiple of block_m;
      block_expert [max_padded_rows / block_m] int32: the expert of each M-block (E for blocks past the end);
      padded_rows  [1] int32: the rows used; M-blocks from there on are idle.
    Torch ops only, no host synchronisation (CUDA-graph safe)."""
    dev = topk_ids.device
    flat = topk_ids.reshape(-1).to(torch.int64)
    pairs = flat.numel()
    counts = torch.zeros(experts, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)  # pair indices by expert, token order within one
    expert_of = flat[order]
    row = torch.arange(pairs, device=dev) - start[expert_of] + padded_start[expert_of]
    rows = max_padded_rows(pairs, experts, block_m)
    sorted_pairs = torch.full((rows,), pairs, dtype=torch.int32, device=dev)
    sorted_pairs[row] = order.to(torch.int32)
    block_start = torch.arange(0, rows, block_m, device=dev)
    block_expert = torch.searchsorted(padded_end, block_start, right=True).to(torch.int32)
    return sorted_pairs, block_expert, padded_end[-1:].to(torch.int32)


# ----------------------------------------------------------------------------------------------------------------
# Kernels


@triton.jit
def _grouped_gemm_kernel(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, c_ptr, router_w_ptr,
                         sorted_pairs_ptr, block_expert_ptr, padded_rows_ptr,
                         pairs, m_blocks,
                         stride_a, stride_as, stride_we, stride_wn, stride_wse, stride_wsn, stride_c,
                         N: tl.constexpr, K: tl.constexpr,  # per layer: a compile per shape, loops of known trip count
                         A_ROW_DIV: tl.constexpr, WEIGHTED: tl.constexpr, FP8: tl.constexpr, EVEN_K: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C[pair, n] = sum_k A[pair // A_ROW_DIV, k] * W[expert, n, k] (x router weight) for one BLOCK_M x BLOCK_N block."""
    # Programs walk GROUP_M M-blocks down one N column before the next, so the A rows of a group and the weight
    # columns of one expert stay in L2 while they are used.
    pid = tl.program_id(0)
    n_blocks = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * n_blocks
    first_m = (pid // in_group) * GROUP_M
    group_rows = tl.minimum(m_blocks - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_rows
    pid_n = (pid % in_group) // group_rows
    if pid_m * BLOCK_M >= tl.load(padded_rows_ptr):
        return
    pair = tl.load(sorted_pairs_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    real = pair < pairs  # padding rows: nothing loaded, nothing stored
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    a_row = (pair // A_ROW_DIV).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_load = offs_n % N  # columns past N read a valid column again; the store drops them
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + a_row[:, None] * stride_a + offs_k[None, :]
    w_ptrs = w_ptr + expert * stride_we + n_load[None, :].to(tl.int64) * stride_wn + offs_k[:, None]  # [K, N] view
    if FP8:
        a_scale_ptrs = a_scale_ptr + a_row * stride_as
        w_scale_ptrs = w_scale_ptr + expert * stride_wse + (n_load // _QUANT) * stride_wsn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=real[:, None], other=0.0)
            w = tl.load(w_ptrs)
        else:
            k_in = offs_k < K - k0
            a = tl.load(a_ptrs, mask=real[:, None] & k_in[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_in[:, None], other=0.0)
        if FP8:
            # DeepSeek's promotion: the tensor core sums one 128-wide K block alone; fp32 adds the blocks, scaled.
            a_scale = tl.load(a_scale_ptrs + k0 // BLOCK_K, mask=real, other=0.0)
            w_scale = tl.load(w_scale_ptrs + k0 // BLOCK_K)
            acc += tl.dot(a, w) * (a_scale[:, None] * w_scale[None, :])
        else:
            acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if WEIGHTED:
        acc = acc * tl.load(router_w_ptr + pair, mask=real, other=0.0)[:, None]
    c_ptrs = c_ptr + pair[:, None].to(tl.int64) * stride_c + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=real[:, None] & (offs_n[None, :] < N))


@triton.jit
def _e4m3_1x128(v):
    """v [R, 128] fp32 -> (e4m3 codes, the R fp32 scales): scale = amax / 448, code = e4m3(v * 448 / amax)."""
    amax = tl.max(tl.abs(v), axis=1)
    normal = amax >= _E4M3_MIN_AMAX
    # IEEE divisions (Triton's `/` on fp32 is an approximate one), as quantize_blocks and xstage compute them.
    scale = tl.where(normal, tl.math.div_rn(amax, _E4M3_MAX), 1.0)
    inv = tl.where(normal, tl.math.div_rn(tl.full(amax.shape, _E4M3_MAX, tl.float32), amax), 1.0)
    return tl.clamp(v * inv[:, None], -_E4M3_MAX, _E4M3_MAX).to(tl.float8e4nv), scale


@triton.jit
def _quantize_kernel(x_ptr, q_ptr, s_ptr, rows, cols, stride_x, stride_q, stride_s,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """x [rows, cols] -> e4m3 codes [rows, cols] and scales [rows, cols / 128], one 1x128 block per row and program column."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (r < rows)[:, None]
    v = tl.load(x_ptr + r[:, None].to(tl.int64) * stride_x + c[None, :], mask=ok, other=0.0).to(tl.float32)
    q, scale = _e4m3_1x128(v)
    tl.store(q_ptr + r[:, None].to(tl.int64) * stride_q + c[None, :], q, mask=ok)
    tl.store(s_ptr + r.to(tl.int64) * stride_s + tl.program_id(1), scale, mask=r < rows)


@triton.jit
def _swiglu_kernel(h_ptr, out_ptr, s_ptr, rows, inter, stride_h, stride_out, stride_s,
                   FP8: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """out[r, c] = silu(h[r, c]) * h[r, inter + c] in fp32 -> bf16, or (FP8) 1x128 e4m3 codes and scales."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (r < rows)[:, None] & (c < inter)[None, :]
    h_row = h_ptr + r[:, None].to(tl.int64) * stride_h
    gate = tl.load(h_row + c[None, :], mask=ok, other=0.0).to(tl.float32)
    up = tl.load(h_row + inter + c[None, :], mask=ok, other=0.0).to(tl.float32)
    v = gate * tl.sigmoid(gate) * up
    out_ptrs = out_ptr + r[:, None].to(tl.int64) * stride_out + c[None, :]
    if FP8:
        q, scale = _e4m3_1x128(v)
        tl.store(out_ptrs, q, mask=ok)
        tl.store(s_ptr + r.to(tl.int64) * stride_s + tl.program_id(1), scale, mask=r < rows)
    else:
        tl.store(out_ptrs, v.to(out_ptr.dtype.element_ty), mask=ok)


# ----------------------------------------------------------------------------------------------------------------
# The layer


@dataclass
class ExpertWeights:
    """W1 [E, 2*h_inter, h] (gate rows, then up rows), W2 [E, h, h_inter]; bf16, or e4m3 codes with fp32 scales
    [E, rows / 128, cols / 128] (one per 128x128 block)."""
    w1: torch.Tensor
    w2: torch.Tensor
    w1_scale: Optional[torch.Tensor] = None
    w2_scale: Optional[torch.Tensor] = None

    @property
    def fp8(self) -> bool:
        return self.w1.dtype == torch.float8_e4m3fn

    def bytes_per_expert(self) -> int:
        n = self.w1[0].numel() * self.w1.element_size() + self.w2[0].numel() * self.w2.element_size()
        if self.fp8:
            n += (self.w1_scale[0].numel() + self.w2_scale[0].numel()) * 4
        return n


def quantize_rows(x: torch.Tensor):
    """x [rows, cols] (cols a multiple of 128) -> (e4m3 codes [rows, cols], fp32 scales [rows, cols / 128]) by the
    Triton kernel (inside the layer, as a server quantizes its tokens)."""
    rows, cols = x.shape
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty(rows, cols // QUANT, dtype=torch.float32, device=x.device)
    block_r = 16
    _quantize_kernel[(triton.cdiv(rows, block_r), cols // QUANT)](
        x, q, s, rows, cols, x.stride(0), q.stride(0), s.stride(0), BLOCK_R=block_r, BLOCK_C=QUANT)
    return q, s


def swiglu(h1: torch.Tensor, fp8: bool):
    """h1 [rows, 2*inter] (gate, up) -> silu(gate) * up: bf16 [rows, inter], or (fp8) (codes, scales [rows, inter / 128])."""
    rows, two_inter = h1.shape
    inter = two_inter // 2
    out = torch.empty(rows, inter, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16, device=h1.device)
    scales = torch.empty(rows, inter // QUANT, dtype=torch.float32, device=h1.device) if fp8 else None
    block_r = 16
    _swiglu_kernel[(triton.cdiv(rows, block_r), triton.cdiv(inter, QUANT))](
        h1, out, scales if fp8 else out, rows, inter, h1.stride(0), out.stride(0), scales.stride(0) if fp8 else 0,
        FP8=fp8, BLOCK_R=block_r, BLOCK_C=QUANT)
    return out, scales


def grouped_gemm(a, a_scale, w, w_scale, out, router_w, sorted_pairs, block_expert, padded_rows, pairs: int,
                 a_row_div: int, blocks: Blocks):
    """out[p, :] = A[p // a_row_div, :] @ W[expert of p].T (x router_w[p]) for every real pair p in sorted_pairs."""
    fp8 = a_scale is not None
    N, K = w.shape[1], w.shape[2]
    if fp8 and blocks.block_k != QUANT:
        raise ValueError(f"fp8 needs BLOCK_K = {QUANT} (one scale per K block), got {blocks.block_k}")
    m_blocks = sorted_pairs.numel() // blocks.block_m
    grid = (m_blocks * triton.cdiv(N, blocks.block_n),)
    _grouped_gemm_kernel[grid](
        a, a_scale if fp8 else a, w, w_scale if fp8 else w, out, router_w if router_w is not None else out,
        sorted_pairs, block_expert, padded_rows,
        pairs, m_blocks,
        a.stride(0), a_scale.stride(0) if fp8 else 0, w.stride(0), w.stride(1),
        w_scale.stride(0) if fp8 else 0, w_scale.stride(1) if fp8 else 0, out.stride(0),
        N=N, K=K, A_ROW_DIV=a_row_div, WEIGHTED=router_w is not None, FP8=fp8, EVEN_K=K % blocks.block_k == 0,
        BLOCK_M=blocks.block_m, BLOCK_N=blocks.block_n, BLOCK_K=blocks.block_k, GROUP_M=blocks.group_m,
        num_warps=blocks.num_warps, num_stages=blocks.num_stages)


def topk_sum(rows: torch.Tensor, tokens: int, top_k: int) -> torch.Tensor:
    """The top-k weighted sum: rows [T*k, h] (already times their router weights) -> [T, h], fp32 accumulation."""
    return rows.view(tokens, top_k, -1).sum(dim=1)


def moe_layer(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, weights: ExpertWeights,
              blocks: Blocks) -> torch.Tensor:
    """The whole layer: x [T, h] bf16, topk_ids [T, k] int32 (distinct experts per token, in [0, E)), topk_weights
    [T, k] fp32 -> [T, h] bf16. No host synchronisation (capturable in a CUDA graph); inputs are not checked here
    (check_inputs)."""
    T, h = x.shape
    k = topk_ids.shape[1]
    E, two_inter, _ = weights.w1.shape
    pairs = T * k
    sorted_pairs, block_expert, padded_rows = align(topk_ids, E, blocks.block_m)
    a, a_scale = quantize_rows(x) if weights.fp8 else (x, None)
    h1 = torch.empty(pairs, two_inter, dtype=torch.bfloat16, device=x.device)
    grouped_gemm(a, a_scale, weights.w1, weights.w1_scale, h1, None, sorted_pairs, block_expert, padded_rows, pairs,
                 k, blocks)
    act, act_scale = swiglu(h1, weights.fp8)
    h2 = torch.empty(pairs, h, dtype=torch.bfloat16, device=x.device)
    grouped_gemm(act, act_scale, weights.w2, weights.w2_scale, h2, topk_weights.reshape(-1), sorted_pairs,
                 block_expert, padded_rows, pairs, 1, blocks)
    return topk_sum(h2, T, k)


def check_inputs(x, topk_ids, topk_weights, weights: ExpertWeights) -> None:
    """What moe_layer assumes, checked once outside the timed region (ValueError naming what is wrong)."""
    if x.dim() != 2 or x.dtype != torch.bfloat16 or not x.is_contiguous():
        raise ValueError(f"x must be a contiguous [T, h] bf16 tensor, got {tuple(x.shape)} {x.dtype}")
    T, h = x.shape
    E, two_inter, h1 = weights.w1.shape
    inter = two_inter // 2
    if h1 != h or two_inter % 2 or tuple(weights.w2.shape) != (E, h, inter):
        raise ValueError(f"W1 must be [E, 2*h_inter, h] and W2 [E, h, h_inter] with h = {h}: got "
                         f"{tuple(weights.w1.shape)} and {tuple(weights.w2.shape)}")
    if weights.fp8:
        if h % QUANT or inter % QUANT:
            raise ValueError(f"fp8 needs h and h_inter multiples of {QUANT}, got {h} and {inter}")
        want = [(E, two_inter // QUANT, h // QUANT), (E, h // QUANT, inter // QUANT)]
        got = [tuple(s.shape) if s is not None else None for s in (weights.w1_scale, weights.w2_scale)]
        if got != want:
            raise ValueError(f"fp8 weight scales must be {want}, got {got}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T or topk_ids.dtype != torch.int32:
        raise ValueError(f"topk_ids must be [T={T}, k] int32, got {tuple(topk_ids.shape)} {topk_ids.dtype}")
    k = topk_ids.shape[1]
    if tuple(topk_weights.shape) != (T, k) or topk_weights.dtype != torch.float32:
        raise ValueError(f"topk_weights must be [{T}, {k}] float32, got {tuple(topk_weights.shape)} {topk_weights.dtype}")
    if T and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= E):
        raise ValueError(f"topk_ids must lie in [0, {E})")
    if k > 1 and bool((topk_ids.sort(dim=1).values.diff(dim=1) == 0).any()):
        raise ValueError("topk_ids names an expert twice for one token (top-k ids must be distinct)")


# ----------------------------------------------------------------------------------------------------------------
# Inputs and the reference


def quantize_blocks(x: torch.Tensor, block_rows: int):
    """Torch's e4m3 quantization by blocks of block_rows x 128 of the last two dims (rows a multiple of block_rows,
    columns of 128): the formula of _e4m3_1x128. -> (codes, fp32 scales [..., rows / block_rows, cols / 128])."""
    *lead, rows, cols = x.shape
    v = x.float().reshape(*lead, rows // block_rows, block_rows, cols // QUANT, QUANT)
    amax = v.abs().amax(dim=(-3, -1), keepdim=True)
    normal = amax >= E4M3_MIN_AMAX
    e4m3_max = torch.full_like(amax, E4M3_MAX)  # tensor / tensor: torch turns `scalar / tensor` into a reciprocal
    scale = torch.where(normal, amax / e4m3_max, torch.ones_like(amax))
    inv = torch.where(normal, e4m3_max / amax, torch.ones_like(amax))
    q = (v * inv).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).reshape(x.shape)
    return q, scale.reshape(*lead, rows // block_rows, cols // QUANT)


def dequantize(q: torch.Tensor, scale: torch.Tensor, block_rows: int) -> torch.Tensor:
    return q.float() * scale.repeat_interleave(block_rows, -2).repeat_interleave(QUANT, -1)


def quantize_weights(w: torch.Tensor, experts_per_step: int = 8):
    """bf16 [E, rows, cols] -> (codes, scales) by 128x128 blocks, a few experts at a time (fp32 temporaries)."""
    q = torch.empty(w.shape, dtype=torch.float8_e4m3fn, device=w.device)
    s = torch.empty(w.shape[0], w.shape[1] // QUANT, w.shape[2] // QUANT, dtype=torch.float32, device=w.device)
    for e in range(0, w.shape[0], experts_per_step):
        q[e:e + experts_per_step], s[e:e + experts_per_step] = quantize_blocks(w[e:e + experts_per_step], QUANT)
    return q, s


def balanced_routing(tokens: int, top_k: int, experts: int, gen: torch.Generator):
    """xstage's balanced routing (src/moe/problem/routing.cpp): pair q = t*k + j -> perm[q mod E] of a seeded
    permutation; router weights 0.1 + U(0, 1), normalised per token. -> (ids [T, k] int32, weights [T, k] fp32), CPU."""
    if top_k > experts:
        raise ValueError(f"top-k {top_k} > {experts} experts: a token's experts must be distinct")
    perm = torch.randperm(experts, generator=gen)
    ids = perm[torch.arange(tokens * top_k) % experts].reshape(tokens, top_k).to(torch.int32)
    w = 0.1 + torch.rand(tokens, top_k, generator=gen, dtype=torch.float64)
    return ids, (w / w.sum(dim=1, keepdim=True)).float()


def random_weights(experts: int, h: int, inter: int, gen: torch.Generator, device) -> ExpertWeights:
    """bf16 weights N(0, 1/fan_in) (outputs of each GEMM stay O(1)), drawn on the device from the generator's seed."""
    dgen = torch.Generator(device=device).manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
    w1 = torch.randn(experts, 2 * inter, h, generator=dgen, device=device, dtype=torch.bfloat16).mul_(h ** -0.5)
    w2 = torch.randn(experts, h, inter, generator=dgen, device=device, dtype=torch.bfloat16).mul_(inter ** -0.5)
    return ExpertWeights(w1, w2)


def to_fp8(weights: ExpertWeights) -> ExpertWeights:
    w1, s1 = quantize_weights(weights.w1)
    w2, s2 = quantize_weights(weights.w2)
    return ExpertWeights(w1, w2, s1, s2)


def reference_layer(x, topk_ids, topk_weights, weights: ExpertWeights, tokens: torch.Tensor) -> torch.Tensor:
    """The layer in float32 for the given token indices, rounded where moe_layer stores: bf16 Linear-1 output,
    bf16 (or 1x128 e4m3) activations, bf16 weighted Linear-2 rows, bf16 output; fp8 tokens quantized 1x128 and
    weights dequantized exactly. -> [len(tokens), h] float32."""
    bf16 = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    xs = x[tokens]
    xs = dequantize(*quantize_blocks(xs, 1), 1) if weights.fp8 else xs.float()
    ids = topk_ids[tokens].long()
    rw = topk_weights[tokens]
    rows = torch.zeros(*ids.shape, x.shape[1], dtype=torch.float32, device=x.device)  # [n, k, h]
    inter = weights.w2.shape[2]
    for e in torch.unique(ids).tolist():
        t_idx, j_idx = torch.nonzero(ids == e, as_tuple=True)
        if weights.fp8:
            w1 = dequantize(weights.w1[e], weights.w1_scale[e], QUANT)
            w2 = dequantize(weights.w2[e], weights.w2_scale[e], QUANT)
        else:
            w1, w2 = weights.w1[e].float(), weights.w2[e].float()
        h1 = bf16(xs[t_idx] @ w1.T)
        v = torch.nn.functional.silu(h1[:, :inter]) * h1[:, inter:]
        v = dequantize(*quantize_blocks(v, 1), 1) if weights.fp8 else bf16(v)
        rows[t_idx, j_idx] = bf16((v @ w2.T) * rw[t_idx, j_idx, None])
    return bf16(rows.sum(dim=1))


def rel_l2(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want).norm() / want.norm().clamp_min(1e-30))


# ----------------------------------------------------------------------------------------------------------------
# CLI


def csv_list(kind, choices=None):
    def parse(text):
        items = [kind(v) for v in text.split(",") if v]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        for v in items:
            if choices is not None and v not in choices:
                raise argparse.ArgumentTypeError(f"{v!r} is not one of {', '.join(choices)}")
            if kind is int and v < 1:
                raise argparse.ArgumentTypeError(f"{v} must be >= 1")
        return items
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Exit status: 0 all checks pass; 1 a check failed; 2 bad arguments or no GPU.")
    p.add_argument("--h", type=int, default=7168, help="hidden size (default 7168)")
    p.add_argument("--h-inter", type=int, default=2048, help="intermediate size per expert (default 2048)")
    p.add_argument("--experts", type=int, default=256, help="experts E (default 256)")
    p.add_argument("--top-k", type=int, default=8, help="experts per token k (default 8)")
    p.add_argument("--tokens", type=csv_list(int), default=[1024, 4096, 8192], help="comma-separated token counts T")
    p.add_argument("--dtype", type=csv_list(str, ("bf16", "fp8")), default=["bf16", "fp8"],
                   help="comma-separated: bf16, fp8 (W8A8 e4m3, 1x128 / 128x128 scales). Default both")
    p.add_argument("--trials", type=int, default=20, help="timed trials per layer (default 20)")
    p.add_argument("--warmup-ms", type=float, default=1500.0, help="GPU warm-up per layer in ms (default 1500)")
    p.add_argument("--check-tokens", type=int, default=64, help="tokens checked against the reference (default 64)")
    p.add_argument("--seed", type=int, default=None, help="input seed (default: fresh, printed)")
    p.add_argument("--blocks", type=str, default=None, help="M,N,K,GROUP_M,WARPS,STAGES for every layer instead of the rule")
    p.add_argument("--eager", action="store_true", help="time eager calls instead of CUDA-graph replays")
    p.add_argument("--json", type=str, default=None, help="write the results as JSON to this file")
    args = p.parse_args(argv)
    for name in ("h", "h_inter", "experts", "top_k", "trials", "check_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.top_k > args.experts:
        p.error(f"--top-k {args.top_k} > --experts {args.experts}: a token's experts must be distinct")
    if "fp8" in args.dtype and (args.h % QUANT or args.h_inter % QUANT):
        p.error(f"fp8 needs --h and --h-inter multiples of {QUANT}, got {args.h} and {args.h_inter}")
    if args.blocks is not None:
        try:
            args.blocks = parse_blocks(args.blocks)
        except ValueError as e:
            p.error(str(e))
        if "fp8" in args.dtype and args.blocks.block_k != QUANT:
            p.error(f"--blocks: fp8 needs BLOCK_K = {QUANT}")
    return args


def time_layer(fn, args) -> dict:
    warm_up(fn, args.warmup_ms)
    calls = calls_per_timing(fn)
    mode, unit = "eager", repeat(fn, calls)
    if not args.eager:
        try:
            unit, mode = captured(fn, calls).replay, "graph"
        except RuntimeError as e:  # an op that cannot be captured: eager, and say so
            print(f"  CUDA-graph capture failed ({e}); timing eager calls")
            torch.cuda.synchronize()
    timed = time_in_turn({"layer": unit}, args.trials, warmup=1)["layer"]
    per_call = [ms / calls for ms in timed.ms]
    return {"timing": mode, "calls_per_timing": calls, "trial_ms": per_call,
            "median_ms": statistics.median(per_call), "min_ms": min(per_call)}


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: the Triton baseline runs on a GPU (the kernels' CPU test runs them in Triton's "
              "interpreter: tests/python/test_triton_moe.py)", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(7), "little")
    print(f"seed {seed}; {torch.cuda.get_device_name()}; triton {triton.__version__}, torch {torch.__version__}")
    gen = torch.Generator().manual_seed(seed)
    bf16_weights = random_weights(args.experts, args.h, args.h_inter, gen, dev)
    layers = {"bf16": bf16_weights}
    if "fp8" in args.dtype:
        layers["fp8"] = to_fp8(bf16_weights)
        if "bf16" not in args.dtype:
            del layers["bf16"]
    del bf16_weights
    doc = {"tool": "tools/moe/triton_moe.py", "argv": sys.argv[1:] if argv is None else list(argv), "seed": seed,
           "device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
           "results": []}
    header = f"{'layer':<40} {'blocks':<24} {'rel L2':>8} {'timing':>6} {'ms':>8} {'min ms':>8} {'TFLOP/s':>8} {'W TB/s':>7}"
    print(header)
    failures = 0
    for T in args.tokens:
        ids, rw = balanced_routing(T, args.top_k, args.experts, gen)
        x = torch.randn(T, args.h, generator=gen).to(torch.bfloat16)
        ids, rw, x = ids.to(dev), rw.to(dev), x.to(dev)
        check_idx = torch.linspace(0, T - 1, min(T, args.check_tokens), device=dev).round().long().unique()
        experts_used = int(torch.unique(ids).numel())
        for dtype in args.dtype:
            weights = layers[dtype]
            check_inputs(x, ids, rw, weights)
            blocks = args.blocks or choose_blocks(T, args.top_k, args.experts, dtype)
            name = f"h{args.h}-i{args.h_inter}-e{args.experts}-k{args.top_k}/t{T}/balanced/{dtype}"
            fn = lambda: moe_layer(x, ids, rw, weights, blocks)  # noqa: E731
            out = fn()
            err = rel_l2(out[check_idx], reference_layer(x, ids, rw, weights, check_idx))
            tol = TOLERANCE[dtype]
            ok = err <= tol and bool(torch.isfinite(out).all())
            rec = {"config": name, "h": args.h, "h_inter": args.h_inter, "E": args.experts, "k": args.top_k,
                   "tokens": T, "dtype": dtype, "routing": "balanced", "blocks": asdict(blocks),
                   "check": {"rel_l2": err, "tolerance": tol, "tokens_checked": int(check_idx.numel()), "pass": ok}}
            if not ok:
                failures += 1
                print(f"{name:<40} {str(blocks):<24} {err:8.2e} FAILED the check (tolerance {tol:g}"
                      f"{'; non-finite output' if not bool(torch.isfinite(out).all()) else ''}): not timed")
            else:
                rec.update(time_layer(fn, args))
                flop = 2.0 * T * args.top_k * 3 * args.h * args.h_inter
                wbytes = experts_used * weights.bytes_per_expert()
                rec.update({"flop": flop, "tflops": flop / (rec["median_ms"] * 1e-3) / 1e12,
                            "weight_bytes": wbytes, "weight_tbps": wbytes / (rec["median_ms"] * 1e-3) / 1e12})
                print(f"{name:<40} {str(blocks):<24} {err:8.2e} {rec['timing']:>6} {rec['median_ms']:8.3f} "
                      f"{rec['min_ms']:8.3f} {rec['tflops']:8.1f} {rec['weight_tbps']:7.2f}")
            doc["results"].append(rec)
            if args.json:  # after every layer: a cut-off run keeps its results
                with open(args.json, "w") as f:
                    json.dump(doc, f, indent=1)
    if args.json:
        print(f"wrote {args.json}")
    print(f"{failures} check failure(s)" if failures else "all checks pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
