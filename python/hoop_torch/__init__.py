"""hoop as a torch.distributed backend.

Importing this package registers the backend "hoop" (installed with pip,
it is imported when torch is: _hoop_torch_autoload.py); then

    torch.distributed.init_process_group("hoop")

works wherever init_process_group("gloo") does (torchrun, env://, tcp://,
file://): rank 0 puts hoop's unique id in the store the process group is
made with, and the timeout given to init_process_group is hoop's. CPU
tensors always; CUDA tensors when hoop_torch.cuda is True (built with CUDA
against a PyTorch with CUDA). docs/torch.md lists the calls and limits.
"""

import inspect

import torch
import torch.distributed as dist

from . import _C

__all__ = ["ProcessGroupHoop", "cuda", "hoop_version", "stats"]

ProcessGroupHoop = _C.ProcessGroupHoop
cuda = _C.cuda
hoop_version = _C.hoop_version


def _create(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


def _register():
    devices = ["cpu", "cuda"] if cuda else ["cpu"]
    # PyTorch 2.1 added `devices`: without it a backend is taken to serve
    # CPU and CUDA tensors, with a warning.
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params:
        dist.Backend.register_backend("hoop", _create, devices=devices)
    else:
        dist.Backend.register_backend("hoop", _create)


def _backend_of(group):
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    # PyTorch 1.13 hands back the backend itself as the process group; from
    # 2.0 a process group holds one backend per device type.
    if isinstance(pg, ProcessGroupHoop):
        return pg
    backend = pg._get_backend(torch.device("cpu"))
    # TORCH_DISTRIBUTED_DEBUG=DETAIL puts a checking wrapper around it.
    while hasattr(backend, "wrapped_pg"):
        backend = backend.wrapped_pg
    if not isinstance(backend, ProcessGroupHoop):
        raise ValueError(f"{pg} is not a process group of the hoop backend")
    return backend


def stats(group=None):
    """hoop's counters of a group's collectives (the default group unless
    told): bytes_sent, bytes_received, and calls[(collective, algorithm)]
    with calls, seconds, wait_seconds (waiting for late ranks) and bytes.
    Point-to-point messages are not counted here."""
    return _backend_of(group).stats()


_register()
