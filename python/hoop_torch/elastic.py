"""Going on when ranks are lost, for DDP scripts on the hoop backend.

When a rank dies or stops, the others' next collective raises RuntimeError
(naming the rank). Catch it around the training step and call shrink():
the survivors agree on who is left (hoop_comm_shrink), and the default
process group is made again of them alone, with their new ranks and world
size. Wrap the model in DDP again (DDP holds the group it was made with),
take rank 0's state with share_state(), and redo the step:

    from hoop_torch import elastic

    try:
        step(ddp, batch)
    except RuntimeError:
        elastic.shrink()
        ddp = DDP(model)
        elastic.share_state(model, optimizer)
        # redo the step; dist.get_world_size() is the survivors'

docs/examples/ddp_mnist.py --elastic is a whole script; docs/torch.md
compares this with torchrun's restarts and torchft.
"""
import datetime
import os

import torch
import torch.distributed as dist

from . import _C, _backend_of

__all__ = ["shrink", "share_state"]


def _tcp_store(host, port, size, is_master, timeout):
    """A TCPStore; with USE_LIBUV=0, as torch's env:// honours it, one
    without libuv (PyTorch 2.4 on ask for it, and Debian 13 builds it
    without)."""
    args = (host, port, size, is_master, timeout)
    if os.environ.get("USE_LIBUV") == "0":
        try:
            return dist.TCPStore(*args, wait_for_workers=False,
                                 use_libuv=False)
        except TypeError:  # before 2.4: no libuv to turn off
            pass
    return dist.TCPStore(*args, wait_for_workers=False)


def shrink(timeout=datetime.timedelta(minutes=5)):
    """After a collective of the default group raised because ranks were
    lost: every surviving rank calls it, and gets the default group made
    again of the survivors, in their old order. Returns old_ranks: new rank
    i was rank old_ranks[i]. A rank the others left out (it stopped and
    came back) raises RuntimeError. The new group meets on a store that the
    survivors' new rank 0 opens (the old one may have been on a lost
    rank), at the address hoop reaches it on."""
    rank, size, old_ranks, handle = _C.shrink(_backend_of(None))
    store = None
    try:
        if rank == 0:
            host = _C.listen_address(handle)
            store = _tcp_store(host, 0, size, True, timeout)
            where = f"{host} {store.port}"
        else:
            where = ""
        host, port = _C.share_text(handle, where).split()
    finally:
        _C.destroy(handle)
    if store is None:
        store = _tcp_store(host, int(port), size, False, timeout)
    dist.destroy_process_group()
    dist.init_process_group("hoop", store=store, rank=rank, world_size=size,
                            timeout=timeout)
    return old_ranks


def share_state(model, optimizer=None, extra=None):
    """Rank 0's parameters, buffers and optimiser state to every rank of
    the default group, and `extra` (a tensor, such as the place in the
    epoch) in place: after shrink(), the state every replica takes up."""
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, 0)
    if optimizer is not None:
        for state in optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    dist.broadcast(value, 0)
    if extra is not None:
        dist.broadcast(extra, 0)
