"""The Triton fused-MoE baseline (tools/moe/triton_moe.py) on the CPU: triton_moe_interpreted.py runs its kernels in
Triton's interpreter, in a Python process of its own (TRITON_INTERPRET=1 has to be set before triton is imported,
and must not leak into the other tests of a pytest session, whose torch.compile would run interpreted). Skips
only where triton is not importable."""

import os
import subprocess
import sys

import pytest

_CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "triton_moe_interpreted.py")


def test_kernels_in_triton_interpreter():
    pytest.importorskip("triton", reason="triton is not importable (scripts/requirements.txt pins it)")
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", _CASES], env=env,
                         capture_output=True, text=True, timeout=300)
    print(run.stdout[-3000:])
    assert run.returncode == 0, f"{_CASES} failed (exit {run.returncode}):\n{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
