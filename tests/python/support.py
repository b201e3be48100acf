"""What the CPU tests share: a torch.compile backend that keeps the graphs, and empty CUDA tensors (made under the
`fake` fixture of conftest.py, so no GPU is needed)."""

import torch


def cuda(*shape, dtype=torch.bfloat16, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


class Capture:
    """A torch.compile backend that keeps the FX graphs and runs them as they are (on fake tensors)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def ops(self):
        return [n.target for g in self.graphs for n in g.graph.nodes if n.op == "call_function"]

    def node(self, target):
        return next(n for g in self.graphs for n in g.graph.nodes if n.target == target)
