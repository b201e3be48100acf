"""xstage.distributed: xstage's communicator for a torch.distributed process group.

One GPU needs none of this: without torch.distributed (or with a default group of one rank) the ops and
xstage.nn.MoE build a local communicator of one rank on the tensors' device on their first call.

    torch.distributed.init_process_group("nccl")        # under torchrun; torch.cuda.set_device(local_rank) first
    xstage.distributed.init()                           # once, collective: every rank of the group
    out = xstage.ulysses_attention(q, k, v)             # ops find the communicator of their group
    ...
    xstage.distributed.teardown()                       # collective: every rank, before destroy_process_group

init() builds one xstage communicator (an NCCL communicator of its own, comm::Runtime in the C library) for
the group: rank 0 of the group makes the NCCL unique id, the group broadcasts it as a uint8 CUDA tensor, and
every rank joins on torch.cuda.current_device(). All ranks must be on one node and reach each other by
NVLink loads/stores (the C library checks NCCL's LSA team and raises xstage.PlatformError otherwise).

The communicator caches the layers the ops build: one per (op, shape, options), each with its buffers and
symmetric NCCL windows, so calls after the first allocate nothing but their outputs. A layer is built on
the first call that needs it; that call blocks the host (allocation, a barrier): warm up before capturing
a CUDA graph. Building and destroying layers is collective, like the calls themselves: every rank of the
group runs the same ops with the same shapes in the same order.
"""

from __future__ import annotations

import threading
from typing import Dict, Optional

import torch

from . import _capi

__all__ = ["Communicator", "get_communicator", "init", "is_initialized", "poll", "teardown"]

_DEFAULT = ""  # the key of the default group (group=None)

_lock = threading.RLock()
_comms: Dict[str, "Communicator"] = {}
_local: Dict[int, "Communicator"] = {}  # device -> the one-rank communicator of a process without a group


def group_key(group) -> str:
    """The key the ops carry for `group`: "" for the default group, else its group_name (a string
    torch.compile puts into the graph as a constant)."""
    return _DEFAULT if group is None else group.group_name


class Communicator:
    """This rank's xstage communicator for one process group, and the layers built on it."""

    def __init__(self, handle: int, group, rank: int, world_size: int, device: int):
        self.handle = handle
        self.group = group
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self._layers: Dict[tuple, tuple] = {}  # key -> (kind, handle), in creation order

    def __repr__(self):
        return (
            f"xstage.distributed.Communicator(rank={self.rank}, world_size={self.world_size}, "
            f"device=cuda:{self.device}, layers={len(self._layers)})"
        )

    def layer(self, key: tuple, create) -> int:
        """The cached layer for `key`, else `create()` (collective) cached under it."""
        entry = self._layers.get(key)
        if entry is None:
            if self.handle is None:
                raise RuntimeError("xstage.distributed: this communicator was torn down")
            entry = (key[0], create())
            self._layers[key] = entry
        return entry[1]

    def drop_layer(self, key: tuple) -> None:
        """Destroys the cached layer for `key` (collective, like building it); the next call for `key` builds a
        new one."""
        entry = self._layers.pop(key, None)
        if entry is not None:
            (_capi.ulysses_destroy if entry[0] == "ulysses" else _capi.moe_destroy)(entry[1])

    def layers(self):
        """(key, layer handle) of every cached layer, in creation order."""
        return [(key, entry[1]) for key, entry in self._layers.items()]

    def poll(self) -> None:
        """Raises, for the first of its layers with something to report (each report once): xstage.InputError
        for router ids dropped since the last poll (the layer goes on), xstage.PlatformError for a device-side
        failure (a wait that timed out) that ended a layer. Never blocks."""
        for kind, handle in self._layers.values():
            (_capi.ulysses_poll if kind == "ulysses" else _capi.moe_poll)(handle)

    def barrier(self) -> None:
        _capi.comm_barrier(self.handle)

    def close(self) -> None:
        """Collective: destroys the layers (in creation order, the same on every rank), then the communicator."""
        error = None
        for kind, handle in list(self._layers.values()):
            try:
                (_capi.ulysses_destroy if kind == "ulysses" else _capi.moe_destroy)(handle)
            except _capi.XstageError as e:  # still free the rest; report the first failure
                error = error or e
        self._layers.clear()
        if self.handle is not None:
            handle, self.handle = self.handle, None
            _capi.comm_destroy(handle)
        if error is not None:
            raise error


def _dist():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "xstage.distributed.init: no torch.distributed process group; call "
            "torch.distributed.init_process_group('nccl') first (e.g. under torchrun)"
        )
    return dist


def init(group=None) -> Communicator:
    """Builds (once) this rank's xstage communicator for `group` (default: the default process group) and
    returns it; a second call for the same group returns the same one. Collective: every rank of the group
    calls it. Needs an NCCL group, a CUDA GPU per rank (torch.cuda.current_device(), set it before) and all
    ranks in one NVLink domain."""
    dist = _dist()
    key = group_key(group)
    with _lock:
        if key in _comms:
            return _comms[key]
        backend = str(dist.get_backend(group))
        if "nccl" not in backend:
            raise ValueError(
                f"xstage.distributed.init: the process group's backend is {backend!r}; xstage needs an NCCL group "
                f"(torch.distributed.init_process_group('nccl'))"
            )
        if not torch.cuda.is_available():
            raise _capi.PlatformError("xstage.distributed.init: this PyTorch sees no CUDA GPU")
        device = torch.cuda.current_device()
        rank = dist.get_rank(group)
        world_size = dist.get_world_size(group)
        src = 0 if group is None else dist.get_global_rank(group, 0)

        # Every rank checks that it can run xstage before anyone waits in a collective for the others.
        failure = None
        try:
            _capi.load_library()
            _capi.check_device(device)
        except _capi.XstageError as e:
            failure = e
        ok = torch.tensor([0 if failure else 1], dtype=torch.int32, device=f"cuda:{device}")
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)
        if failure is not None:
            raise failure
        if int(ok.item()) == 0:
            raise _capi.PlatformError("xstage.distributed.init: another rank of the group cannot run xstage (see its error)")

        # Rank 0 makes the NCCL unique id; one more byte says whether it could.
        payload = torch.zeros(1 + _capi.COMM_UNIQUE_ID_BYTES, dtype=torch.uint8, device=f"cuda:{device}")
        if rank == 0:
            try:
                uid = _capi.comm_unique_id()
                payload[1:] = torch.frombuffer(bytearray(uid), dtype=torch.uint8).to(payload.device)
                payload[0] = 1
            except _capi.XstageError as e:
                failure = e
        dist.broadcast(payload, src=src, group=group)
        if failure is not None:
            raise failure
        data = bytes(payload.cpu().tolist())
        if data[0] != 1:
            raise _capi.PlatformError("xstage.distributed.init: rank 0 of the group could not make the NCCL unique id")
        handle = _capi.comm_create(data[1:], rank, world_size, device)
        comm = Communicator(handle, group, rank, world_size, device)
        _comms[key] = comm
        if group is None:  # the default group passed explicitly finds it too
            world = dist.group.WORLD
            if world is not None:
                _comms.setdefault(world.group_name, comm)
        return comm


def is_initialized(group=None) -> bool:
    return group_key(group) in _comms


def get_communicator(group=None, op: str = "xstage") -> Communicator:
    """The communicator init() built for `group`; RuntimeError saying what to do if there is none."""
    return communicator_for_key(group_key(group), op)


def _default_group_size() -> int:
    """The default group's size: 1 without torch.distributed."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _local_communicator(device: int) -> Communicator:
    """The one-rank communicator on `device`, built on first use: an NCCL communicator of this process alone
    (its unique id made here, so no process group is needed to hand it out)."""
    with _lock:
        comm = _local.get(device)
        if comm is None:
            _capi.check_device(device)
            handle = _capi.comm_create(_capi.comm_unique_id(), 0, 1, device)
            comm = _local[device] = Communicator(handle, None, 0, 1, device)
        return comm


def communicator_for_key(key: str, op: str = "xstage", device: Optional[int] = None) -> Communicator:
    """The communicator of the group with this key. For the default group of a process without
    torch.distributed (or whose default group has one rank) and a CUDA `device`: the local communicator on that
    device, built on first use."""
    comm = _comms.get(key)
    if comm is None:
        if key == _DEFAULT and device is not None:
            local = _local.get(device)
            if local is not None:
                return local
            if _default_group_size() == 1:
                return _local_communicator(device)
        which = "the default process group" if key == _DEFAULT else f"process group {key!r}"
        raise RuntimeError(
            f"{op}: xstage.distributed is not initialised for {which}: call "
            f"xstage.distributed.init({'' if key == _DEFAULT else 'group'}) on every rank first"
        )
    return comm


def world_size_for_key(key: str) -> Optional[int]:
    """The group's size if its communicator exists or it is the default group of a process without
    torch.distributed (1); else None. Fake implementations check shapes against it."""
    comm = _comms.get(key)
    if comm is not None:
        return comm.world_size
    return 1 if key == _DEFAULT and _default_group_size() == 1 else None


def _all_communicators():
    return list(dict.fromkeys(list(_comms.values()) + list(_local.values())))


def find_layer(handle: int):
    """(communicator, key) of the cached layer with this handle, or None."""
    for comm in _all_communicators():
        for key, layer in comm.layers():
            if layer == handle:
                return comm, key
    return None


def poll(group=None) -> None:
    """Raises what the device found in earlier calls of any layer of the group's communicator (default: every
    communicator), each once: xstage.InputError for dropped router ids (the layer goes on), xstage.PlatformError
    for a failure that ended a layer (a device-side wait that timed out); never blocks. Calls are asynchronous:
    these surface here (an ended layer also on its next call), not at the call that caused them."""
    comms = [get_communicator(group)] if group is not None else _all_communicators()
    for comm in comms:
        comm.poll()


def teardown(group=None) -> None:
    """Collective: destroys the communicator of `group` (default: every communicator init() built, and the
    local ones) and its layers, after the device has finished with them. Call it on every rank before
    torch.distributed.destroy_process_group(); ops need init() again afterwards."""
    with _lock:
        if group is None:
            targets = _all_communicators()
            _local.clear()
        else:
            key = group_key(group)
            targets = [_comms[key]] if key in _comms else []
        error = None
        for comm in targets:
            for k in [k for k, c in _comms.items() if c is comm]:
                del _comms[k]
            try:
                comm.close()
            except _capi.XstageError as e:
                error = error or e
        if error is not None:
            raise error
