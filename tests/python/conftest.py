"""Shared by the xstage Python tests: the package comes from python/ of this checkout (PYTHONPATH, set by
ctest; added here too so `pytest tests/python` works from the repository root), the C library from
XSTAGE_C_LIBRARY (ctest: the build's libxstage_c.so) or from the installed package."""

import os
import sys

import pytest

_PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
if os.path.isdir(os.path.join(_PYTHON_DIR, "xstage")) and os.path.abspath(_PYTHON_DIR) not in map(os.path.abspath, sys.path):
    sys.path.insert(0, os.path.abspath(_PYTHON_DIR))


@pytest.fixture
def fake():
    """Tensors made inside are fake (no memory, no GPU): what the ops' fake implementations see."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        yield mode


@pytest.fixture(scope="session")
def c_library():
    """The loaded libxstage_c.so. Skips where none was built and none was named (a bare `pytest` run); fails
    where XSTAGE_C_LIBRARY names one that does not load (ctest always names the build's)."""
    import xstage

    if not os.environ.get("XSTAGE_C_LIBRARY") and not os.path.isfile(xstage.library_path()):
        pytest.skip("libxstage_c.so not built: set XSTAGE_C_LIBRARY=<build dir>/libxstage_c.so")
    return xstage.load_library()


def pytest_configure(config):
    config.addinivalue_line("markers", "fake_cuda1: builds fake tensors on cuda:1 (needs no GPU at all, or two)")


def pytest_runtest_setup(item):
    # On a machine with one GPU, PyTorch initialises CUDA for a fake tensor and refuses the ordinal 1.
    if item.get_closest_marker("fake_cuda1") is not None:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() < 2:
            pytest.skip("fake cuda:1 tensors need no GPU or two GPUs")
