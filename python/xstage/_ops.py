"""How xstage's operators are registered with torch: one torch.library.Library for the "xstage" namespace, each
op's schema inferred from its implementation's annotations, the implementation registered for every backend
(CompositeExplicitAutograd: the body rejects what it cannot run, with an error that names the problem) and a
fake implementation for torch.compile and fake tensors.

This is the lower-level torch.library API rather than torch.library.custom_op, which registers the same but
wraps each call in Python layers (autograd, output aliasing checks, a dynamo guard): on the H200 machine's host
those cost ~10 us per call, as much as all of an eager flash_attention call's own Python work (docs/PYTHON.md,
"Host time per call"). The ops are forward-only: no autograd formula is registered.
"""

from __future__ import annotations

import torch

_LIB = torch.library.Library("xstage", "DEF")
# Public as torch.library.infer_schema since torch 2.5; torch 2.4 has it in torch._library.
_infer_schema = getattr(torch.library, "infer_schema", None)
if _infer_schema is None:
    from torch._library.infer_schema import infer_schema as _infer_schema


def define(name: str, impl, fake) -> torch._ops.OpOverload:
    """Defines torch.ops.xstage.<name> with impl (annotated: the schema comes from its signature, no argument
    mutated) and fake; returns the op's OpOverload (torch.ops.xstage.<name>.default), the cheapest to call."""
    _LIB.define(name + _infer_schema(impl, mutates_args=()))
    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"xstage::{name}", fake, lib=_LIB)
    return getattr(torch.ops.xstage, name).default
