"""xstage.nn: modules over xstage's operators.

    moe = xstage.nn.MoE.from_weights(w1, w2, top_k=8, dtype=torch.float8_e4m3fn)   # this rank's experts
    y = moe(x, topk_ids, topk_weights)                                               # router runs outside
"""

from __future__ import annotations

from typing import Optional

import torch

from . import distributed
from .moe import DEFAULT_SCHEDULE, _round_up, default_tile_n, moe, moe_pack_weights, _schedule_codes

__all__ = ["MoE"]


class MoE(torch.nn.Module):
    """The routed experts of an MoE feed-forward (SwiGLU experts: down(silu(gate(x)) * up(x))), expert-parallel
    over `group` with xstage's fused MegaMoE layer. Forward only: a backward through it raises.

    Holds this rank's num_experts/P experts as buffers, already in the layer's format: w1 tile-interleaved
    (and, for dtype=torch.float8_e4m3fn, both matrices as e4m3 codes with 128x128-block fp32 scales,
    quantized once by load_weights). forward(x, topk_ids, topk_weights): x [..., hidden] bf16, topk_ids
    [..., top_k] int32 global expert ids, topk_weights [..., top_k] float32 -> [..., hidden] bf16.

    schedule: default "auto" (docs/PYTHON.md); max_tokens: the most tokens per forward on this rank
    (required with more than one rank, the same on every rank; one rank: any count).
    """

    def __init__(
        self,
        num_experts: int,
        hidden: int,
        inter: int,
        top_k: int,
        *,
        dtype: torch.dtype = torch.bfloat16,
        group=None,
        max_tokens: Optional[int] = None,
        schedule: str = DEFAULT_SCHEDULE,
        tile_n: Optional[int] = None,
        cluster_n: int = 0,
        cluster_m: int = 1,
        timeout_s: float = 10.0,
        device=None,
    ):
        super().__init__()
        _schedule_codes(schedule)  # the C library's names: xstage.InputError (a ValueError) for any other
        world = _group_size(group)
        if num_experts % world != 0:
            raise ValueError(f"xstage.nn.MoE: {num_experts} experts cannot be split evenly over the group's {world} ranks")
        if world > 1 and not max_tokens:
            raise ValueError(f"xstage.nn.MoE: pass max_tokens (the same on every rank) for a group of {world} ranks")
        self.num_experts, self.hidden, self.inter, self.top_k = num_experts, hidden, inter, top_k
        self.dtype, self.group, self.max_tokens, self.schedule = dtype, group, max_tokens, schedule
        self.cluster_n, self.cluster_m, self.timeout_s = cluster_n, cluster_m, timeout_s
        self.tile_n = int(tile_n) if tile_n else default_tile_n(dtype, hidden, inter)
        self.experts_per_rank = e = num_experts // world
        wdtype = dtype
        self.register_buffer("w1", torch.empty((e, 2 * inter, hidden), dtype=wdtype, device=device))
        self.register_buffer("w2", torch.empty((e, hidden, inter), dtype=wdtype, device=device))
        if dtype == torch.bfloat16:
            self.w1_scales = self.w2_scales = None
        else:
            f32 = torch.float32
            self.register_buffer("w1_scales", torch.ones((e * 2 * inter // 128, _round_up(hidden // 128, 4)), dtype=f32, device=device))
            self.register_buffer("w2_scales", torch.ones((e * hidden // 128, _round_up(inter // 128, 4)), dtype=f32, device=device))

    @classmethod
    def from_weights(cls, w1: torch.Tensor, w2: torch.Tensor, top_k: int, *, group=None, **kwargs) -> "MoE":
        """A module holding this rank's experts: w1 [E_local, 2*inter, hidden] (gate rows, then up rows),
        w2 [E_local, hidden, inter], any float dtype, on a Hopper GPU (made bf16, packed, quantized once)."""
        e_local, n2, hidden = w1.shape
        module = cls(e_local * _group_size(group), hidden, n2 // 2, top_k, group=group, device=w1.device, **kwargs)
        module.load_weights(w1, w2)
        return module

    @torch.no_grad()
    def load_weights(self, w1: torch.Tensor, w2: torch.Tensor) -> None:
        """Packs (and for fp8 quantizes) this rank's logical expert weights into the module's buffers:
        w1 [E_local, 2*inter, hidden] with each expert's gate rows then up rows, w2 [E_local, hidden, inter]."""
        packed = moe_pack_weights(
            w1.to(torch.bfloat16).contiguous(), w2.to(torch.bfloat16).contiguous(), dtype=self.dtype, tile_n=self.tile_n
        )
        for name in ("w1", "w2", "w1_scales", "w2_scales"):
            value = getattr(packed, name)
            if value is not None:
                if getattr(self, name).shape != value.shape:
                    raise ValueError(f"xstage.nn.MoE.load_weights: {name} has shape {tuple(value.shape)}; the module's is "
                                     f"{tuple(getattr(self, name).shape)}")
                setattr(self, name, value)

    def forward(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = moe(
            x.reshape(-1, self.hidden),
            topk_ids.reshape(-1, self.top_k),
            topk_weights.reshape(-1, self.top_k),
            self.w1,
            self.w2,
            self.w1_scales,
            self.w2_scales,
            group=self.group,
            tile_n=self.tile_n,
            schedule=self.schedule,
            max_tokens=self.max_tokens,
            cluster_n=self.cluster_n,
            cluster_m=self.cluster_m,
            timeout_s=self.timeout_s,
        )
        return y.reshape(*lead, self.hidden)

    def extra_repr(self) -> str:
        return (
            f"num_experts={self.num_experts}, experts_per_rank={self.experts_per_rank}, hidden={self.hidden}, "
            f"inter={self.inter}, top_k={self.top_k}, dtype={self.dtype}, schedule={self.schedule!r}, tile_n={self.tile_n}"
        )


def _group_size(group) -> int:
    """The group's size: from xstage's communicator if built, else torch.distributed's, else 1."""
    key = distributed.group_key(group)
    size = distributed.world_size_for_key(key)
    if size is not None:
        return size
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group)
    return 1
