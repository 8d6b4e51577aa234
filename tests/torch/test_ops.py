#!/usr/bin/python3
"""Every call of the hoop backend beside the same call through gloo.

    PYTHONPATH=<build>/python /usr/bin/python3 tests/torch/test_ops.py NPROCS

Each process joins the default group with backend "hoop" and a gloo group
of the same ranks (tests/torch/harness.py). Each case makes the call
through hoop and through gloo on the same inputs (rank r's inputs are
seeded by r and the case, so any process can make any rank's) and compares
the results: exactly for integers, bool, data movement and MIN/MAX, to a
tolerance for float sums and products, whose order of operations differs.
Where gloo lacks the call or the dtype (PyTorch 1.13's gloo has no bool,
bfloat16, AVG, PREMUL_SUM, reduce_scatter, all_gather_into_tensor or list
all_to_all), the reference is the same result through gloo another way,
said at each place. Tensors are contiguous and not (a strided view), in
place and out of place where the call has both. Every case must also show
in hoop's own counters, so that a call that fell through to gloo cannot
pass. The process exits non-zero naming each difference.
"""
import sys
import time
import zlib
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

R = dist.ReduceOp
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int8, torch.uint8, torch.int32, torch.int64)
DTYPES = FLOATS + INTS + (torch.bool,)
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12,
             torch.float16: 1e-2, torch.bfloat16: 2e-2}
# Moved as bytes by hoop, so any dtype; gloo refuses int16 and complex.
MOVED = (torch.float32, torch.bfloat16, torch.int16, torch.bool,
         torch.complex64)
GLOO_MOVES = (torch.float32, torch.int64, torch.float16, torch.uint8)
# The 2.x names, else 1.13's.
all_gather_into_tensor = (getattr(dist, "all_gather_into_tensor", None)
                          or dist._all_gather_base)
reduce_scatter_tensor = (getattr(dist, "reduce_scatter_tensor", None)
                         or dist._reduce_scatter_base)
premul_sum = getattr(dist, "_make_nccl_premul_sum", None)


def premul_op(factor):
    try:
        return premul_sum(factor)
    except TypeError:  # PyTorch 1.13 takes a tensor factor as a list
        return premul_sum([factor])


def make(shape, dtype, *seed):
    """Test data of one rank and case; the same in every process."""
    g = torch.Generator().manual_seed(zlib.crc32(repr(seed).encode()))
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, 4, shape, generator=g).to(dtype)


def strided(t):
    """A non-contiguous view (every other element) holding t's values."""
    base = torch.zeros(tuple(t.shape) + (2,), dtype=t.dtype)
    view = base[..., 0]
    view.copy_(t)
    return view


LAYOUTS = {"contiguous": lambda t: t.clone(), "strided": strided}


def hoop_calls():
    import hoop_torch
    return sum(c["calls"] for c in hoop_torch.stats()["calls"].values())


class Check:
    def __init__(self, rank, n, gloo):
        self.rank, self.n, self.gloo = rank, n, gloo
        self.failures, self.compared = [], 0

    def same(self, name, got, want, exact=False):
        self.compared += 1
        if got.dtype != want.dtype or got.shape != want.shape:
            ok = False
        elif exact or not (got.dtype.is_floating_point or got.is_complex()):
            ok = torch.equal(got, want)
        else:
            tol = TOLERANCE[got.dtype]
            ok = torch.allclose(got.double(), want.double(), rtol=tol,
                                atol=tol)
        if not ok:
            self.failures.append(
                f"{name}: hoop gave {got.dtype} {list(got.shape)} "
                f"{got.flatten()[:6].tolist()}, reference {want.dtype} "
                f"{list(want.shape)} {want.flatten()[:6].tolist()}")

    def through_hoop(self, name, before):
        """hoop's counters moved since `before` (one rank's calls count
        too): the calls went through hoop, not around it."""
        if hoop_calls() <= before:
            self.failures.append(f"{name}: hoop's counters did not move: "
                                 "the calls did not go through hoop")

    def report(self, where=""):
        """Prints this rank's failures, and on rank 0 how many results were
        compared; whether none failed."""
        for f in self.failures:
            print(f"rank {self.rank}: {f}", flush=True)
        if self.rank == 0:
            print(f"rank 0: {self.compared} results compared{where}, "
                  f"{len(self.failures)} differ", flush=True)
        return not self.failures

    def moved(self, name, got, want):
        """Data only moved, never computed on: exactly equal."""
        self.same(name, got, want, exact=True)

    def gloo_reduce(self, x, op):
        """x reduced over the ranks through gloo, as a new tensor."""
        if op == R.AVG:
            total = self.gloo_reduce(x.double() if x.is_floating_point()
                                     else x, R.SUM)
            if x.is_floating_point():
                return (total / self.n).to(x.dtype)
            return torch.div(total, self.n, rounding_mode="trunc")
        if x.dtype == torch.bool:
            # Any true (SUM, MAX) or all true (PRODUCT, MIN).
            wide = x.to(torch.uint8)
            op = R.MAX if op in (R.SUM, R.MAX) else R.MIN
        else:
            wide = x.float() if x.dtype == torch.bfloat16 else x.clone()
        dist.all_reduce(wide, op=op, group=self.gloo)
        return wide.to(x.dtype)


def ops_for(dtype):
    ops = [("sum", R.SUM), ("product", R.PRODUCT), ("min", R.MIN),
           ("max", R.MAX)]
    if dtype != torch.bool:
        ops.append(("avg", R.AVG))
    return ops


def case_allreduce(c):
    for dtype in DTYPES:
        for opname, op in ops_for(dtype):
            for layout, shape in LAYOUTS.items():
                x = make((37,), dtype, c.rank, "allreduce", opname)
                t = shape(x)
                dist.all_reduce(t, op=op)
                c.same(f"all_reduce {dtype} {opname} {layout}", t,
                       c.gloo_reduce(x, op),
                       exact=opname in ("min", "max"))
    # Many slices and chunks, beyond the few elements above.
    x = make((300_001,), torch.float32, c.rank, "allreduce-large")
    t = x.clone()
    dist.all_reduce(t)
    c.same("all_reduce large", t, c.gloo_reduce(x, R.SUM))


def case_premul_sum(c):
    if premul_sum is None:
        return
    for dtype in (torch.float32, torch.float64, torch.float16):
        x = make((29,), dtype, c.rank, "premul")
        for name, factor in (("scalar", 0.25),
                             ("tensor", torch.tensor([0.25], dtype=dtype))):
            for layout, shape in LAYOUTS.items():
                t = shape(x)
                dist.all_reduce(t, op=premul_op(factor))
                # gloo has no PREMUL_SUM: a SUM of the scaled inputs.
                c.same(f"all_reduce {dtype} premul_sum {name} {layout}", t,
                       c.gloo_reduce(x * 0.25, R.SUM))


def case_allreduce_coalesced(c):
    for dtype, op in ((torch.float32, R.SUM), (torch.int32, R.MAX)):
        xs = [make(shape, dtype, c.rank, "coalesced", i)
              for i, shape in enumerate([(5,), (3, 4), (11,)])]
        # Separate tensors (one not contiguous), and views of one buffer.
        ts = [xs[0].clone(), strided(xs[1]), xs[2].clone()]
        flat = torch.cat([x.flatten() for x in xs])
        views = [v.view(x.shape) for v, x in
                 zip(flat.split([x.numel() for x in xs]), xs)]
        for name, tensors in (("separate", ts), ("views", views)):
            dist.all_reduce_coalesced(tensors, op=op)
            refs = [x.clone() for x in xs]
            dist.all_reduce_coalesced(refs, op=op, group=c.gloo)
            for i, (t, ref) in enumerate(zip(tensors, refs)):
                c.same(f"all_reduce_coalesced {dtype} {name} [{i}]", t, ref)


def case_broadcast(c):
    for root in range(c.n):
        for dtype in MOVED:
            for layout, shape in LAYOUTS.items():
                x = make((23,), dtype, c.rank, "broadcast")
                t = shape(x)
                dist.broadcast(t, src=root)
                want = make((23,), dtype, root, "broadcast")
                if dtype in GLOO_MOVES:
                    want = x.clone()
                    dist.broadcast(want, src=root, group=c.gloo)
                c.moved(f"broadcast {dtype} root {root} {layout}", t, want)


def case_reduce(c):
    for root in range(c.n):
        for dtype, opname, op in ((torch.float32, "sum", R.SUM),
                                  (torch.int32, "max", R.MAX),
                                  (torch.float16, "sum", R.SUM)):
            for layout, shape in LAYOUTS.items():
                x = make((31,), dtype, c.rank, "reduce", opname)
                t = shape(x)
                dist.reduce(t, dst=root, op=op)
                ref = x.clone()
                dist.reduce(ref, dst=root, op=op, group=c.gloo)
                if c.rank == root:
                    c.same(f"reduce {dtype} {opname} root {root} {layout}",
                           t, ref)
                else:
                    c.same(f"reduce {dtype} root {root}: input kept", t, x,
                           exact=True)


def gathered(c, dtype, shape, *case):
    """What every rank's all-gather of make(shape, dtype, r, *case) gives."""
    return [make(shape, dtype, r, *case) for r in range(c.n)]


def case_allgather(c):
    for dtype in MOVED:
        x = make((3, 5), dtype, c.rank, "allgather")
        want = gathered(c, dtype, (3, 5), "allgather")
        if dtype in GLOO_MOVES:
            want = [torch.empty_like(x) for _ in range(c.n)]
            dist.all_gather(want, x, group=c.gloo)
        flat = torch.zeros((c.n * 3, 5), dtype=dtype)
        outputs = {
            "separate": [torch.zeros_like(x) for _ in range(c.n)],
            "strided": [strided(torch.zeros_like(x)) for _ in range(c.n)],
            "views": list(flat.chunk(c.n)),
        }
        for name, outs in outputs.items():
            dist.all_gather(outs, strided(x) if name == "strided" else x)
            for r in range(c.n):
                c.moved(f"all_gather {dtype} {name} [{r}]", outs[r], want[r])
        # In place: the input is this rank's block of the output.
        flat.zero_()
        blocks = list(flat.chunk(c.n))
        blocks[c.rank].copy_(x)
        dist.all_gather(blocks, blocks[c.rank])
        c.moved(f"all_gather {dtype} in place", flat, torch.cat(want))


def case_allgather_into_tensor(c):
    for dtype in MOVED:
        x = make((7,), dtype, c.rank, "allgather-into")
        # gloo has no all_gather_into_tensor: its list all_gather, joined.
        want = torch.cat(gathered(c, dtype, (7,), "allgather-into"))
        if dtype in GLOO_MOVES:
            parts = [torch.empty_like(x) for _ in range(c.n)]
            dist.all_gather(parts, x, group=c.gloo)
            want = torch.cat(parts)
        out = torch.zeros(c.n * 7, dtype=dtype)
        all_gather_into_tensor(out, x)
        c.moved(f"all_gather_into_tensor {dtype}", out, want)
        out = strided(torch.zeros(c.n * 7, dtype=dtype))
        all_gather_into_tensor(out, strided(x))
        c.moved(f"all_gather_into_tensor {dtype} strided", out, want)
        out = torch.zeros(c.n * 7, dtype=dtype)
        out[c.rank * 7:(c.rank + 1) * 7].copy_(x)
        all_gather_into_tensor(out, out[c.rank * 7:(c.rank + 1) * 7])
        c.moved(f"all_gather_into_tensor {dtype} in place", out, want)


def case_reduce_scatter(c):
    for dtype, opname, op in ((torch.float32, "sum", R.SUM),
                              (torch.int64, "min", R.MIN),
                              (torch.bfloat16, "sum", R.SUM),
                              (torch.float64, "avg", R.AVG)):
        x = make((c.n, 9), dtype, c.rank, "reduce-scatter", opname)
        # gloo has no reduce-scatter: its all-reduce, this rank's block.
        want = c.gloo_reduce(x, op)[c.rank]
        exact = opname == "min"
        out = torch.zeros(9, dtype=dtype)
        dist.reduce_scatter(out, [row.clone() for row in x], op=op)
        c.same(f"reduce_scatter {dtype} {opname} list", out, want, exact)
        out = strided(torch.zeros(9, dtype=dtype))
        dist.reduce_scatter(out, list(x.clone()), op=op)
        c.same(f"reduce_scatter {dtype} {opname} views", out, want, exact)
        out = torch.zeros(9, dtype=dtype)
        reduce_scatter_tensor(out, x.flatten().clone(), op=op)
        c.same(f"reduce_scatter_tensor {dtype} {opname}", out, want, exact)
        flat = x.flatten().clone()
        block = flat[c.rank * 9:(c.rank + 1) * 9]
        reduce_scatter_tensor(block, flat, op=op)
        c.same(f"reduce_scatter_tensor {dtype} {opname} in place", block,
               want, exact)


def rows(r, p):
    """Rows rank r sends rank p in the uneven all-to-all (zeros included)."""
    return (r + 2 * p) % 3 + (r == p)


def case_alltoall(c):
    n, r = c.n, c.rank
    for dtype in (torch.float32, torch.int64):
        x = make((2 * n, 3), dtype, r, "alltoall")
        out = torch.zeros_like(x)
        dist.all_to_all_single(out, x)
        ref = torch.zeros_like(x)
        dist.all_to_all_single(ref, x, group=c.gloo)
        c.moved(f"all_to_all_single {dtype} equal", out, ref)
        out = strided(torch.zeros_like(x))
        dist.all_to_all_single(out, strided(x))
        c.moved(f"all_to_all_single {dtype} equal strided", out, ref)
        send = [rows(r, p) for p in range(n)]
        recv = [rows(p, r) for p in range(n)]
        x = make((sum(send), 3), dtype, r, "alltoall-uneven")
        out = torch.zeros((sum(recv), 3), dtype=dtype)
        dist.all_to_all_single(out, x, recv, send)
        ref = torch.zeros_like(out)
        dist.all_to_all_single(ref, x, recv, send, group=c.gloo)
        c.moved(f"all_to_all_single {dtype} uneven", out, ref)
        # The list form; gloo has none: its all_to_all_single with splits.
        ins = list(x.split(send))
        outs = [torch.zeros((k, 3), dtype=dtype) for k in recv]
        dist.all_to_all(outs, ins)
        c.moved(f"all_to_all {dtype} list", torch.cat(outs), ref)


def case_gather_scatter(c):
    for root in range(c.n):
        x = make((6,), torch.float32, c.rank, "gather")
        outs = ([strided(torch.zeros(6)) for _ in range(c.n)]
                if c.rank == root else None)
        dist.gather(x, outs, dst=root)
        refs = [torch.zeros(6) for _ in range(c.n)] if c.rank == root else None
        dist.gather(x, refs, dst=root, group=c.gloo)
        if c.rank == root:
            for p in range(c.n):
                c.moved(f"gather root {root} [{p}]", outs[p], refs[p])
        ins = ([make((6,), torch.int32, root, "scatter", p)
                for p in range(c.n)] if c.rank == root else None)
        out = torch.zeros(6, dtype=torch.int32)
        dist.scatter(out, ins, src=root)
        ref = torch.zeros(6, dtype=torch.int32)
        dist.scatter(ref, ins, src=root, group=c.gloo)
        c.moved(f"scatter root {root}", out, ref)


def case_async_overlap(c):
    """Several calls in flight at once, waited for in another order, one
    through its future; each against the same call through gloo."""
    xs = [make((k,), torch.float32, c.rank, "async", k)
          for k in (1, 100, 70_000, 3)]
    ts = [x.clone() for x in xs]
    works = [dist.all_reduce(t, async_op=True) for t in ts[:3]]
    b = make((17,), torch.int64, c.rank, "async-bcast")
    works.append(dist.broadcast(b, src=c.n - 1, async_op=True))
    works.append(dist.all_reduce(ts[3], op=R.MAX, async_op=True))
    chained = works[1].get_future().then(lambda f: f.value()[0] * 2)
    for w in reversed(works):
        assert w.wait()
        assert w.is_completed()
    for i, (t, x) in enumerate(zip(ts, xs)):
        c.same(f"async all_reduce [{i}]", t,
               c.gloo_reduce(x, R.MAX if i == 3 else R.SUM))
    c.same("async future then", chained.wait(), ts[1] * 2)
    ref = make((17,), torch.int64, c.n - 1, "async-bcast")
    c.same("async broadcast", b, ref)


def sparse_input(rank, shape, sparse_dim, dtype, tag):
    """A rank's uncoalesced sparse tensor: rank 1 has no entries; the
    others a number of their own, repeated and overlapping indices."""
    nnz = 0 if rank == 1 else 4 + 3 * rank
    g = torch.Generator().manual_seed(zlib.crc32(repr((rank, tag)).encode()))
    indices = torch.stack([torch.randint(0, shape[d], (nnz,), generator=g)
                           for d in range(sparse_dim)])
    values = make((nnz,) + tuple(shape[sparse_dim:]), dtype, rank, tag)
    return torch.sparse_coo_tensor(indices, values, shape)


def case_sparse_allreduce(c):
    """Sparse tensors, as DDP all-reduces nn.Embedding(sparse=True)'s
    gradients: the sum through gloo, in rows (one sparse dimension, one
    dense) and in elements (two sparse); then what hoop refuses."""
    for dtype in (torch.float32, torch.float64, torch.int64):
        for sparse_dim, shape in ((1, (50, 3)), (2, (7, 9))):
            tag = ("sparse", str(dtype), sparse_dim)
            x = sparse_input(c.rank, shape, sparse_dim, dtype, tag)
            got, ref = x.clone(), x.clone()
            work = dist.all_reduce(got, async_op=True)
            work.wait()
            dist.all_reduce(ref, group=c.gloo)
            name = f"sparse all_reduce {dtype} {sparse_dim} sparse dims"
            if not got.is_sparse:
                c.failures.append(f"{name}: the result is not sparse")
                continue
            c.same(name, got.to_dense(), ref.to_dense())
            c.same(name + " (the Work's result)", work.result()[0].to_dense(),
                   ref.to_dense())
    x = sparse_input(c.rank, (5, 2), 1, torch.float32, "sparse-max")
    try:
        dist.all_reduce(x, op=R.MAX)
        c.failures.append("sparse all_reduce MAX: no error")
    except RuntimeError as e:
        if "SUM" not in str(e):
            c.failures.append(f"sparse MAX: the error does not say why: {e}")
    if c.n > 1:
        x = sparse_input(c.rank, (5 + c.rank, 2), 1, torch.float32, "sparse")
        try:
            dist.all_reduce(x)
            c.failures.append("sparse all_reduce of different shapes: "
                              "no error")
        except RuntimeError as e:
            if "differs" not in str(e):
                c.failures.append("sparse all_reduce of different shapes: "
                                  f"the error does not say why: {e}")
    t = torch.ones(3)
    dist.all_reduce(t)
    c.same("all_reduce after sparse errors", t, torch.full((3,), float(c.n)))


def case_async_unwaited(c):
    """A call nobody waits for completes on its own: right after
    synchronous calls (which their callers ran themselves, so the group's
    thread looks at its queue on a timer) and after the group has idled
    long enough for that timer to stop."""
    for pause in (0.0, 0.05):
        for _ in range(50):
            dist.all_reduce(torch.ones(8))
        time.sleep(pause)
        x = make((1000,), torch.float32, c.rank, "unwaited", int(pause * 100))
        t = x.clone()
        w = dist.all_reduce(t, async_op=True)
        deadline = time.monotonic() + 10
        while not w.is_completed() and time.monotonic() < deadline:
            time.sleep(0.001)
        if not w.is_completed():
            c.failures.append(f"an unwaited all_reduce {pause} s after "
                              "synchronous calls did not complete in 10 s")
        w.wait()
        c.same(f"unwaited all_reduce after {pause} s", t,
               c.gloo_reduce(x, R.SUM))


def case_barrier_and_errors(c):
    before = hoop_calls()
    dist.barrier()
    c.through_hoop("barrier", before)
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=R.BAND)
        c.failures.append("BAND: no error")
    except RuntimeError as e:
        if "bitwise" not in str(e):
            c.failures.append(f"BAND: the error does not say why: {e}")
    # The group still works after an argument error.
    t = torch.ones(4)
    dist.all_reduce(t)
    c.same("all_reduce after an argument error", t,
           torch.full((4,), float(c.n)))


def case_sequence_number(c):
    """The collectives a group has started, which TORCH_DISTRIBUTED_DEBUG=
    DETAIL compares across ranks: one more per call, the same everywhere."""
    import hoop_torch
    pg = hoop_torch._backend_of(None)
    before = pg._get_sequence_number_for_group()
    dist.all_reduce(torch.ones(2))
    dist.barrier()
    after = pg._get_sequence_number_for_group()
    if after != before + 2:
        c.failures.append(f"sequence number {before} -> {after} over two "
                          "collectives")
    seen = [None] * c.n
    dist.all_gather_object(seen, after, group=c.gloo)
    if len(set(seen)) != 1:
        c.failures.append(f"sequence numbers differ across ranks: {seen}")


def case_p2p(c):
    """Sends and receives: each rank to the next, both directions at once
    (every rank sends first), sync pairs and batch_isend_irecv."""
    n, r = c.n, c.rank
    if n == 1:
        return
    nxt, prv = (r + 1) % n, (r - 1) % n
    for dtype in (torch.float32, torch.bool, torch.int16):
        x = make((13,), dtype, r, "p2p")
        got = strided(torch.zeros(13, dtype=dtype))
        send = dist.isend(x, nxt)
        recv = dist.irecv(got, prv)
        send.wait()
        recv.wait()
        c.moved(f"isend/irecv ring {dtype}", got,
               make((13,), dtype, prv, "p2p"))
        if r < 2:
            y = make((5,), dtype, 0, "pair")
            if r == 0:
                dist.send(y, 1)
            else:
                z = torch.zeros(5, dtype=dtype)
                dist.recv(z, 0)
                c.moved(f"send/recv {dtype}", z, y)
    for rounds in range(2):
        x = make((8,), torch.float64, r, "batch", rounds)
        got_prev = torch.zeros(8, dtype=torch.float64)
        got_next = torch.zeros(8, dtype=torch.float64)
        ops = [dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.isend, x, prv),
               dist.P2POp(dist.irecv, got_prev, prv),
               dist.P2POp(dist.irecv, got_next, nxt)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        c.moved(f"batch_isend_irecv from previous, round {rounds}", got_prev,
               make((8,), torch.float64, prv, "batch", rounds))
        c.moved(f"batch_isend_irecv from next, round {rounds}", got_next,
               make((8,), torch.float64, nxt, "batch", rounds))


CASES = [case_allreduce, case_premul_sum, case_allreduce_coalesced,
         case_broadcast, case_reduce, case_allgather,
         case_allgather_into_tensor, case_reduce_scatter, case_alltoall,
         case_gather_scatter, case_async_overlap, case_async_unwaited,
         case_sparse_allreduce,
         case_barrier_and_errors,
         case_sequence_number]


def rank_main(rank, n, gloo):
    c = Check(rank, n, gloo)
    for case in CASES + [case_p2p]:
        before = hoop_calls()
        case(c)
        # Sends and receives have communicators of their own, not counted.
        if case is not case_p2p and (case is not case_premul_sum
                                     or premul_sum is not None):
            c.through_hoop(case.__name__, before)
    return c.report()


if __name__ == "__main__":
    harness.main(rank_main, int(sys.argv[1]))
