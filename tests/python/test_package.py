"""The package imports anywhere (no GPU, no library), finds and checks its C library, and the library is what
the design needs: a C ABI that exports only xstage_* and carries its own CUDA runtime."""

import ctypes
import os
import shutil
import subprocess
import sys

import pytest

import xstage
from xstage import _capi

_PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def _run_python(code, **env_overrides):
    env = dict(os.environ)
    env["PYTHONPATH"] = _PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    for key, value in env_overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_import_without_gpu_or_library_and_lazy_loading():
    code = (
        "import xstage, xstage._capi as c\n"
        "assert c._lib is None, 'importing must not load the library'\n"
        "assert not xstage.is_available()\n"
        "try:\n"
        "    xstage.load_library()\n"
        "except xstage.LibraryError as e:\n"
        "    print('LibraryError:', e)\n"
        "print('version', xstage.__version__)\n"
    )
    r = _run_python(code, CUDA_VISIBLE_DEVICES="", XSTAGE_C_LIBRARY="/nonexistent/libxstage_c.so")
    assert r.returncode == 0, r.stderr
    assert "version 0.1.0" in r.stdout
    assert "XSTAGE_C_LIBRARY=/nonexistent/libxstage_c.so: no such file" in r.stdout


def test_missing_library_message_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.delenv("XSTAGE_C_LIBRARY", raising=False)
    path = _capi.library_path()
    if os.path.isfile(path):
        pytest.skip("the package folder has a built library")
    code = "import xstage\ntry:\n    xstage.load_library()\nexcept RuntimeError as e:\n    print(e)\n"
    r = _run_python(code, XSTAGE_C_LIBRARY=None)
    assert r.returncode == 0, r.stderr
    assert "not built" in r.stdout and "pip install ." in r.stdout and "XSTAGE_C_LIBRARY" in r.stdout


def test_a_file_that_is_not_the_library(tmp_path):
    bogus = tmp_path / "libxstage_c.so"
    bogus.write_bytes(b"not an ELF file")
    r = _run_python(
        "import xstage\ntry:\n    xstage.load_library()\nexcept xstage.LibraryError as e:\n    print('LibraryError:', e)\n",
        XSTAGE_C_LIBRARY=str(bogus),
    )
    assert r.returncode == 0, r.stderr
    assert "LibraryError: cannot load xstage's C library" in r.stdout


def test_library_versions(c_library):
    assert xstage.abi_version() == _capi.ABI_VERSION
    assert xstage.library_version() == xstage.__version__
    assert c_library.xstage_tensor_struct_size() == ctypes.sizeof(_capi.Tensor) == 152
    assert c_library.xstage_last_error() == b""
    assert c_library.xstage_moe_config_struct_size() == ctypes.sizeof(_capi.MoeConfig) == 72


def test_check_device_without_gpu(c_library):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="CUDA is not usable on this machine"):
        xstage.check_device(0)
    with pytest.raises(xstage.PlatformError):
        xstage.check_device(0)


def _library_file():
    return os.environ.get("XSTAGE_C_LIBRARY") or _capi.library_path()


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_library_needs_no_cuda_runtime(c_library):
    out = subprocess.run(["readelf", "-d", _library_file()], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert needed, out
    assert not [lib for lib in needed if "cudart" in lib or "libcuda" in lib or "torch" in lib or "python" in lib], needed
    # NCCL (dynamic: torch's copy in a torch process) and the C/C++ runtime; no cuBLAS (--as-needed: only the
    # MoE library's unfused baseline calls it, and it is not linked in).
    allowed = {"libnccl.so.2", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"}
    assert set(needed) <= allowed, needed


# The newest symbol versions manylinux_2_34's policy allows on x86_64 (auditwheel's manylinux-policy.json), and the
# libraries it lets a wheel need from the system; libnccl.so.2 comes from torch's environment (its nvidia-nccl
# wheel), as a wheel repaired with `auditwheel repair --exclude libnccl.so.2` would leave it.
MANYLINUX = "manylinux_2_34_x86_64"
MANYLINUX_MAX = {"GLIBC": (2, 34), "GLIBCXX": (3, 4, 29), "CXXABI": (1, 3, 13), "GCC": (7, 0, 0)}
MANYLINUX_LIBS = {"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2", "libnccl.so.2"}


def _meets_manylinux(path, needed_beyond):
    """The library at `path` references no symbol version newer than the tag allows and needs only the policy's
    libraries and `needed_beyond`."""
    import re

    symbols = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    newest = {}
    for family, version in re.findall(r"\b(GLIBC|GLIBCXX|CXXABI|GCC)_([0-9.]+)\b", symbols):
        newest[family] = max(newest.get(family, ()), tuple(int(x) for x in version.split(".")))
    assert newest.get("GLIBC"), symbols[:500]
    too_new = {f: v for f, v in newest.items() if v > MANYLINUX_MAX[f]}
    assert not too_new, f"{path} needs {too_new}, newer than {MANYLINUX} allows: change the tag in pyproject.toml"
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    needed = {line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line}
    assert needed <= MANYLINUX_LIBS | needed_beyond, needed


@pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("readelf") is None, reason="no binutils")
def test_library_meets_the_wheels_manylinux_tag(c_library):
    import tomllib

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "pyproject.toml"), "rb") as f:
        overrides = tomllib.load(f)["tool"]["scikit-build"]["overrides"]
    assert [o["wheel"]["tags"] for o in overrides if "tags" in o.get("wheel", {})] == [[f"py3-none-{MANYLINUX}"]]
    _meets_manylinux(_library_file(), set())


@pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("readelf") is None, reason="no binutils")
def test_torch_library_meets_the_wheels_manylinux_tag(c_library):
    """libxstage_torch.so, also in the wheel: beyond the policy it needs the C library beside it and libtorch from
    torch's environment."""
    from xstage import _ops

    path = _ops.torch_library_path()
    if path is None or not os.path.isfile(path):
        pytest.skip(f"{_ops.TORCH_LIBRARY_NAME} not built or not used here")
    _meets_manylinux(path, {"libxstage_c.so", "libtorch_cpu.so", "libtorch_cuda.so"})


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_library_takes_no_driver_symbol(c_library):
    """CuTe's TMA descriptors go through the library's own cuTensorMapEncodeTiled (src/common/tma_encode.hpp, the
    driver's function looked up at run time): nothing of libcuda is left for the loader to find."""
    out = subprocess.run(["nm", "-D", "--undefined-only", _library_file()], capture_output=True, text=True, check=True)
    undefined = {line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()}
    assert not [name for name in undefined if name.startswith("cu") and not name.startswith("cuda")], sorted(undefined)


@pytest.mark.skipif(shutil.which("nm") is None, reason="no nm")
def test_library_exports_only_the_c_abi(c_library):
    out = subprocess.run(["nm", "-D", "--defined-only", _library_file()], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in out.stdout.splitlines() if line.split()[1:2] == ["T"]}
    assert exported == {
        "xstage_abi_version",
        "xstage_tensor_struct_size",
        "xstage_version",
        "xstage_last_error",
        "xstage_check_device",
        "xstage_flash_attention_forward",
        "xstage_flash_attention_forward_trusted",
        "xstage_flash_attention_forward_key_lengths",
        "xstage_flash_attention_forward_key_lengths_trusted",
        "xstage_comm_unique_id",
        "xstage_comm_create",
        "xstage_comm_info",
        "xstage_comm_barrier",
        "xstage_comm_destroy",
        "xstage_ulysses_path_from_name",
        "xstage_ulysses_check_shape",
        "xstage_ulysses_create",
        "xstage_ulysses_forward",
        "xstage_ulysses_poll",
        "xstage_ulysses_destroy",
        "xstage_moe_config_struct_size",
        "xstage_moe_default_tile_n",
        "xstage_moe_schedule_from_name",
        "xstage_moe_check_config",
        "xstage_moe_create",
        "xstage_moe_forward",
        "xstage_moe_forward_trusted",
        "xstage_moe_poll",
        "xstage_moe_ended",
        "xstage_moe_destroy",
        "xstage_moe_pack_w1",
        "xstage_moe_quantize_weights_fp8",
    }
    assert not [line for line in out.stdout.splitlines() if " cuda" in line.lower()]


def test_nccl_preload_from_environment(monkeypatch):
    """XSTAGE_NCCL_LIBRARY names the libnccl.so.2 to preload; a bad one is a LibraryError naming it."""
    monkeypatch.setenv("XSTAGE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2")
    with pytest.raises(xstage.LibraryError, match=r"cannot load NCCL from /nonexistent/libnccl.so.2"):
        _capi._preload_nccl()


def test_nccl_preload_from_the_nvidia_nccl_wheel(monkeypatch, tmp_path):
    """Outside a torch process (no NCCL mapped yet) the nvidia-nccl wheel's library is preferred."""
    import importlib.machinery

    lib = tmp_path / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"not an ELF file")
    spec = importlib.machinery.ModuleSpec("nvidia.nccl", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "nccl")]
    monkeypatch.delenv("XSTAGE_NCCL_LIBRARY", raising=False)
    monkeypatch.setattr(_capi, "_nccl_in_process", lambda: False)
    monkeypatch.setattr(_capi.importlib.util, "find_spec", lambda name: spec if name == "nvidia.nccl" else None)
    with pytest.raises(xstage.LibraryError, match=rf"cannot load NCCL from {lib}/libnccl.so.2"):
        _capi._preload_nccl()
    monkeypatch.setattr(_capi, "_nccl_in_process", lambda: True)  # torch has loaded one: it is used as it is
    assert _capi._preload_nccl() is None
    monkeypatch.setattr(_capi, "_nccl_in_process", lambda: False)
    monkeypatch.setattr(_capi.importlib.util, "find_spec", lambda name: None)  # no wheel: the loader's search
    assert _capi._preload_nccl() is None


def test_importing_xstage_defines_every_op():
    import torch

    for name in ("flash_attention", "ulysses_attention", "moe"):
        assert hasattr(torch.ops.xstage, name)
    assert callable(xstage.distributed.init) and callable(xstage.distributed.teardown)
    assert not xstage.distributed.is_initialized()
    assert issubclass(xstage.nn.MoE, torch.nn.Module)
