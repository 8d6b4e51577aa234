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

A replacement (hoop-run --respawn starts one with HOOP_JOIN=1, the job's
address and its secret, HOOP_AUTH_TOKEN) calls join() instead of
init_process_group; the members let it in with grow(), all at the same
step boundary, then make DDP again and share_state() as after a shrink:

    if elastic.joining():                    # the replacement
        elastic.join()
    else:
        dist.init_process_group("hoop")
    ddp = DDP(model)
    elastic.share_state(model, optimizer)    # rank 0's, to all
    ...
    if step % 16 == 0 and elastic.grow():   # the members, in the loop
        ddp = DDP(model)
        elastic.share_state(model, optimizer)

docs/examples/ddp_mnist.py --elastic is a whole script; docs/torch.md
compares this with torchrun's restarts and torchft.
"""
import collections
import datetime
import os

import torch
import torch.distributed as dist

from . import _C, _backend_of

__all__ = ["grow", "join", "joining", "shrink", "share_state"]


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


def _regroup(rank, size, handle, timeout):
    """Makes the default group again of the ranks of a hoop communicator
    (the handle, destroyed here). They meet on a store that their rank 0
    opens (the old one may have been on a lost rank), at the address hoop
    reaches it on."""
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
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("hoop", store=store, rank=rank, world_size=size,
                            timeout=timeout)


def shrink(timeout=datetime.timedelta(minutes=5)):
    """After a collective of the default group raised because ranks were
    lost: every surviving rank calls it, and gets the default group made
    again of the survivors, in their old order. Returns old_ranks: new rank
    i was rank old_ranks[i]. A rank the others left out (it stopped and
    came back) raises RuntimeError."""
    rank, size, old_ranks, handle = _C.shrink(_backend_of(None))
    _regroup(rank, size, handle, timeout)
    return old_ranks


def joining():
    """Whether this process was started to join a running job (HOOP_JOIN=1,
    as hoop-run --respawn sets for a replacement)."""
    return os.environ.get("HOOP_JOIN") == "1"


def join(timeout=datetime.timedelta(minutes=5)):
    """In a replacement, instead of init_process_group: waits, up to the
    timeout, for the job's members to let it in (their grow()), and makes
    the default group of them all, in which it ranks after them. Needs
    the job's address (HOOP_ROOT_ADDR, or torchrun's MASTER_ADDR and
    MASTER_PORT + 1) and its secret (HOOP_AUTH_TOKEN or
    HOOP_AUTH_TOKEN_FILE) as the members have them. Then make DDP and call
    share_state() as the members do. Returns the new rank."""
    rank, size, handle = _C.join(int(timeout.total_seconds() * 1000))
    _regroup(rank, size, handle, timeout)
    return rank


def grow(timeout=datetime.timedelta(minutes=5)):
    """Every member of the default group, at the same step boundary: lets in
    the processes waiting in join(). Returns how many joined; with none
    (one small broadcast) the group is as it was, else it is made again
    of the members, in their order, and the newcomers, and the caller
    makes DDP again and calls share_state(). Rank 0 listens for newcomers
    at the job's address from its first grow() on."""
    joined, rank, size, handle = _C.grow(_backend_of(None))
    if joined:
        _regroup(rank, size, handle, timeout)
    return joined


def share_state(model, optimizer=None, extra=None):
    """Rank 0's parameters, buffers and optimiser state to every rank of
    the default group, and `extra` (a tensor, such as the place in the
    epoch) in place: after shrink() or grow(), the state every replica
    takes up."""
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, 0)
    if optimizer is not None:
        _share_optimizer(optimizer)
    if extra is not None:
        dist.broadcast(extra, 0)


def _share_optimizer(optimizer):
    """Rank 0's optimiser state. A newcomer's optimiser has not stepped, so
    it may hold no state at all (SGD's momentum, Adam's moments are made at
    the first step): rank 0 sends the layout of its state_dict, each tensor
    as its shape and dtype, as an object, then the tensors in that order,
    and the others load it."""
    layout, tensors = [None], []
    if dist.get_rank() == 0:
        state = optimizer.state_dict()
        tensors = [v for s in state["state"].values() for v in s.values()
                   if torch.is_tensor(v)]
        layout[0] = {
            "param_groups": state["param_groups"],
            "state": {i: {k: _TensorShape(tuple(v.shape), v.dtype)
                          if torch.is_tensor(v) else v
                          for k, v in s.items()}
                      for i, s in state["state"].items()}}
    dist.broadcast_object_list(layout, 0)
    if dist.get_rank() == 0:
        for t in tensors:
            dist.broadcast(t, 0)
        return
    params = [p for g in optimizer.param_groups for p in g["params"]]
    state = {}
    for i, entries in layout[0]["state"].items():
        state[i] = {}
        for k, v in entries.items():
            if isinstance(v, _TensorShape):
                v = torch.empty(v.shape, dtype=v.dtype,
                                device=params[i].device)
                dist.broadcast(v, 0)
            state[i][k] = v
    optimizer.load_state_dict({"state": state,
                               "param_groups": layout[0]["param_groups"]})


# A tensor of rank 0's optimiser state, as its layout announces it.
_TensorShape = collections.namedtuple("_TensorShape", "shape dtype")
