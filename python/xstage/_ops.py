"""How xstage's operators are registered with torch: one torch.library.Library for the "xstage" namespace, each
op's schema inferred from its implementation's annotations, the implementation registered for every backend
(CompositeExplicitAutograd: the body rejects what it cannot run, with an error that names the problem) and a
fake implementation for torch.compile and fake tensors.

This is the lower-level torch.library API rather than torch.library.custom_op, which registers the same but
wraps each call in Python layers (autograd, output aliasing checks, a dynamo guard): on the H200 machine's host
those cost ~10 us per call, as much as all of an eager flash_attention call's own Python work (docs/PYTHON.md,
"Host time per call").

The ops are forward-only (inference). The public functions (xstage.flash_attention, ulysses_attention, moe)
route a call that autograd would record through `forward_only`, whose backward raises; a call under
torch.no_grad() or on tensors that need no gradient goes to the op directly. torch.library.register_autograd
would do the same at the op, but its autograd kernel is Python that runs on every call, requires_grad or not:
host time on every eager call for what only a training mistake needs.
"""

from __future__ import annotations

from typing import List

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


def _no_backward_impl(grad: torch.Tensor, op: str, shape: List[int]) -> torch.Tensor:
    raise RuntimeError(
        f"{op} is forward-only (inference): it has no backward, so gradients cannot flow through it. "
        f"Run the model under torch.no_grad() or torch.inference_mode(), or use another attention backend "
        f"for training"
    )


def _no_backward_fake(grad, op, shape):
    return grad.new_empty(shape)


# The backward of every xstage op: an op of its own, so that torch.compile puts it into the backward graph
# (a Python raise would fail the compilation of the forward) and it raises when the backward runs.
_no_backward = define("no_backward", _no_backward_impl, _no_backward_fake)


class _ForwardOnly(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, *args):
        ctx.name = name
        ctx.shapes = [a.shape if isinstance(a, torch.Tensor) else None for a in args]
        return op(*args)

    @staticmethod
    def backward(ctx, *grads):
        grad = next(g for g in grads if g is not None)
        needs = ctx.needs_input_grad[2:]
        return (None, None) + tuple(
            _no_backward(grad, ctx.name, list(shape)) if need else None for need, shape in zip(needs, ctx.shapes)
        )


def needs_autograd(*tensors) -> bool:
    """Whether autograd would record a call on these tensors (grad mode on and one of them requires grad)."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:  # a loop, not any(<generator>): this runs on every eager call
        if t is not None and t.requires_grad:
            return True
    return False


def forward_only(name: str, op, *args):
    """op(*args) recorded by autograd with a backward that raises (name: the public function, for the message)."""
    return _ForwardOnly.apply(name, op, *args)
