"""The "xstage" backend under diffusers' own context parallelism, on a machine without a GPU: torch's fake
process group at P = 4 and meta tensors. model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=4))
shards the inputs by the model's _cp_plan (no hand sharding); traced, each of Flux's joint attentions is one
xstage.ulysses_attention on the config's Ulysses group with a quarter of the sequence; Wan's self-attention too,
its cross-attention local. (A process of its own: the fake group is global. The composed path, all-to-all +
xstage.flash_attention, is checked numerically in test_diffusers.py; two GPUs: scripts/gpu/diffusers_ulysses.sh.)"""

import os
import sys

import pytest
import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode

import xstage
import xstage.diffusers  # noqa: F401
from support import Capture

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from dit import models as dit_models  # noqa: E402

from diffusers import ContextParallelConfig  # noqa: E402

P = 4


@pytest.fixture(scope="module", autouse=True)
def fake_group():
    dist.init_process_group("fake", rank=0, world_size=P, store=FakeStore())
    yield
    dist.destroy_process_group()


@pytest.fixture(autouse=True)
def one_accelerator(monkeypatch):
    # diffusers places rank r on accelerator r % device_count(): a CPU-only torch counts 0.
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 1)


def parallel(name):
    dit_models.allow_context_parallel_warnings()
    model, inputs = dit_models.build(name, "tiny", "meta")
    model.set_attention_backend("xstage")
    model.enable_parallelism(config=ContextParallelConfig(ulysses_degree=P))
    group = model._parallel_config.context_parallel_config._ulysses_mesh.get_group()
    return model, inputs, group


def traced(model, inputs):
    """torch.compile's graphs of one forward (diffusers' own output gather breaks the graph; the attention
    inside is what is checked)."""
    torch._dynamo.reset()
    backend = Capture()
    with torch.no_grad():
        out = dit_models.output(torch.compile(model, backend=backend)(**inputs, return_dict=False))
    return out, backend


def shape(node, i):
    arg = node.args[i]
    return tuple((arg.meta.get("example_value", arg.meta.get("val"))).shape)


def test_flux_under_enable_parallelism_runs_xstage_ulysses():
    model, inputs, group = parallel("flux")
    with torch.no_grad():
        out = dit_models.output(model(**inputs, return_dict=False))
    assert out.shape == inputs["hidden_states"].shape and out.device.type == "meta"  # gathered back by diffusers
    out, backend = traced(model, inputs)
    ops = backend.ops()
    assert ops.count(torch.ops.xstage.ulysses_attention.default) == 2  # one double-, one single-stream block
    assert torch.ops.xstage.flash_attention.default not in ops
    node = backend.node(torch.ops.xstage.ulysses_attention.default)
    tokens = inputs["hidden_states"].shape[1] + inputs["encoder_hidden_states"].shape[1]
    assert shape(node, 0) == (1, tokens // P, 4, 128)  # this rank's quarter of the joint sequence
    assert node.args[3] == group.group_name
    assert node.args[4] == xstage.ulysses.DEFAULT_ULYSSES_PATH == xstage.diffusers.ulysses_path()


@pytest.mark.parametrize("path", ["serial", "fused_post", "fused_both"])
def test_set_ulysses_path_chooses_the_layers_path(path):
    """set_ulysses_path reaches every Ulysses call of the model (and is fixed in the traced graph); None restores
    the default; an unknown name is refused and leaves the choice as it was."""
    model, inputs, _ = parallel("flux")
    xstage.diffusers.set_ulysses_path(path)
    try:
        with pytest.raises(xstage.InputError, match=r"unknown Ulysses path 'both' \(choose from serial, fused_post, fused_both\)"):
            xstage.diffusers.set_ulysses_path("both")
        assert xstage.diffusers.ulysses_path() == path
        _, backend = traced(model, inputs)
        nodes = [n for g in backend.graphs for n in g.graph.nodes if n.target == torch.ops.xstage.ulysses_attention.default]
        assert len(nodes) == 2 and all(n.args[4] == path for n in nodes)
    finally:
        xstage.diffusers.set_ulysses_path(None)
    assert xstage.diffusers.ulysses_path() == xstage.ulysses.DEFAULT_ULYSSES_PATH


class Calls(TorchDispatchMode):
    """The ops (and their arguments' shapes) an eager run dispatches."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))

    def of(self, op):
        return [shapes for func, shapes in self.calls if func == op]


def test_wan_self_attention_is_ulysses_and_cross_attention_local():
    """Wan's processor hands its cross-attention no parallel config: each rank's quarter of the video tokens
    attends to all text keys with xstage.flash_attention, no communication."""
    model, inputs, group = parallel("wan")
    with torch.no_grad(), Calls() as calls:
        out = dit_models.output(model(**inputs, return_dict=False))
    assert out.shape == inputs["hidden_states"].shape
    tokens, text = inputs["hidden_states"][0, 0].numel() // 4, inputs["encoder_hidden_states"].shape[1]
    (ulysses,) = calls.of(torch.ops.xstage.ulysses_attention.default)
    (flash,) = calls.of(torch.ops.xstage.flash_attention.default)
    assert ulysses[0] == (1, tokens // P, 4, 128)
    assert flash[0] == (1, tokens // P, 4, 128) and flash[1] == (1, text, 4, 128)
    assert not calls.of(torch.ops._c10d_functional.all_to_all_single.default)


def test_the_multi_rank_path_still_needs_init():
    from xstage import distributed

    assert distributed.world_size_for_key("") is None
    with pytest.raises(RuntimeError, match=r"not initialised for the default process group: call xstage.distributed.init\(\)"):
        distributed.communicator_for_key("", "xstage.moe", 0)
    q = torch.empty(1, 64, 8, 128, dtype=torch.bfloat16, device="meta")
    assert xstage.ulysses_attention(q, q, q).shape == q.shape  # the fake needs no communicator
