#!/usr/bin/env python3
"""Data-parallel training with PyTorch DDP, as in PyTorch's DDP tutorial:
one process per rank, a DistributedSampler giving each rank its share of
Fashion-MNIST, DistributedDataParallel averaging the gradients, SGD. The
backend is one word: --backend gloo or --backend hoop (hoop_torch, once
installed, registers "hoop" when torch is imported).

    torchrun --standalone --nproc_per_node 2 docs/examples/ddp_mnist.py --backend hoop

--model mlp (784-200-200-10) or cnn (the network of PyTorch's MNIST
example); --device cuda trains on each rank's GPU (LOCAL_RANK).

--elastic (hoop, CPU) goes on when ranks die or stop: the ranks walk one
shuffled order of each epoch's samples step by step, each step the
launched ranks' batches split among those left, so each sample is
trained on once and the updates are those of a run that lost none, and
a step that raises is redone by the survivors (hoop_torch.elastic). torchrun stops every worker when
one fails, so run it under hoop-run, which keeps the others going:

    build/tools/hoop-run --elastic -n 4 docs/examples/ddp_mnist.py --elastic

With --respawn 1, hoop-run also starts a replacement for the first rank
lost; it joins (hoop_torch.elastic.join) when the others next look for
newcomers, every 16 steps, and takes up rank 0's state.

Without --elastic, --checkpoint FILE saves the state after each epoch and
starts from it, which is how torchrun's restarts go on after a failure:

    torchrun --standalone --nproc_per_node 4 --max_restarts 1 \
        docs/examples/ddp_mnist.py --backend hoop --checkpoint /tmp/ck.pt

The data are the MNIST-format files Debian's dataset-fashion-mnist
installs in /usr/share/datasets/fashion-mnist (--data for others). Rank 0
prints, per epoch, the mean training loss, the test accuracy (every rank
scores its share of the test set; an all_reduce adds them up) and the
training samples per second of all ranks together.
"""
import argparse
import gzip
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler
from torch.utils.data.distributed import DistributedSampler

# Fashion-MNIST's pixel mean and standard deviation.
MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    """An IDX file (the MNIST format), gzipped or not, as a uint8 tensor."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = bytearray(f.read())
    ndims = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndims)]
    data = torch.frombuffer(raw, dtype=torch.uint8, offset=4 + 4 * ndims)
    return data.reshape(dims)


def load(data, split, limit=0):
    """Images (normalised, N x 1 x 28 x 28) and labels of a split."""
    def path(kind):
        p = os.path.join(data, f"{split}-{kind}")
        return p if os.path.exists(p) else p + ".gz"
    images = read_idx(path("images-idx3-ubyte"))
    labels = read_idx(path("labels-idx1-ubyte"))
    if limit:
        images, labels = images[:limit], labels[:limit]
    images = (images.float().unsqueeze(1) / 255.0 - MEAN) / STD
    return images, labels.long()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 200)
        self.fc2 = nn.Linear(200, 200)
        self.fc3 = nn.Linear(200, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class CNN(nn.Module):
    """The network of PyTorch's MNIST example."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, training=self.training)
        return self.fc2(x)


MODELS = {"mlp": MLP, "cnn": CNN}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["hoop", "gloo"], default="hoop")
    p.add_argument("--model", choices=sorted(MODELS), default="mlp")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64,
                   help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per rank")
    p.add_argument("--limit", type=int, default=0,
                   help="train on the first LIMIT samples only")
    p.add_argument("--json", action="store_true",
                   help="print each epoch as a JSON line")
    p.add_argument("--elastic", action="store_true",
                   help="go on without lost ranks (hoop backend, CPU)")
    p.add_argument("--checkpoint", metavar="FILE",
                   help="rank 0 saves the model, optimiser and epoch there "
                        "after each epoch, and a run that finds the file "
                        "goes on from it (what torchrun --max-restarts "
                        "needs)")
    return p.parse_args()


def evaluate(model, images, labels, rank, world):
    """Accuracy on the test set, each rank scoring every world-th sample."""
    model.eval()
    with torch.no_grad():
        mine = slice(rank, None, world)
        hits = (model(images[mine]).argmax(1) == labels[mine]).sum()
    model.train()
    counts = torch.tensor([hits.item(), len(labels[mine])],
                          dtype=torch.float64, device=labels.device)
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def save(path, state):
    """torch.save to a file beside `path`, then renamed over it: a rank
    killed while it writes leaves the last whole checkpoint."""
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def from_hoop_run():
    """Under hoop-run: torch.distributed's variables from hoop's. The store
    takes the port after hoop-run's: the job's address itself is where
    rank 0 lets replacements in."""
    if "RANK" in os.environ or "HOOP_RANK" not in os.environ:
        return
    host, port = os.environ["HOOP_ROOT_ADDR"].rsplit(":", 1)
    os.environ.update(RANK=os.environ["HOOP_RANK"],
                      WORLD_SIZE=os.environ["HOOP_WORLD_SIZE"],
                      MASTER_ADDR=host, MASTER_PORT=str(int(port) + 1))


# Steps between the members' looks for replacements (hoop_torch.elastic.grow,
# one small broadcast when none waits).
GROW_EVERY = 16


class Elastic:
    """The training loop's state that survives lost ranks: the model's
    DDP wrapper (made again for each new group) and the place in the
    epochs, [epoch, samples of it done, steps, samples a step], which rank
    0 hands the survivors, or a replacement, with the parameters and
    optimiser state. A step takes the launched ranks' samples whoever is
    left, so that the run goes through the same updates as one that lost
    none. `launch` holds each rank's launch rank (None: one that
    joined)."""

    def __init__(self, module, optimizer, joined, batch_size):
        from hoop_torch import elastic
        self.elastic, self.module, self.optimizer = elastic, module, optimizer
        self.ddp = DDP(module)
        self.place = torch.tensor(
            [1, 0, 0, dist.get_world_size() * batch_size], dtype=torch.int64)
        self.launch = list(range(dist.get_world_size()))
        if joined:
            self.launch = [None] * dist.get_world_size()
            elastic.share_state(module, optimizer, self.place)

    def renew(self):
        self.ddp = DDP(self.module)
        self.elastic.share_state(self.module, self.optimizer, self.place)

    def recover(self, error):
        start = time.perf_counter()
        old = self.elastic.shrink()
        kept = set(old)
        lost = [str(who) if who is not None else "one that joined"
                for r, who in enumerate(self.launch) if r not in kept]
        self.launch = [self.launch[r] for r in old]
        self.renew()
        if dist.get_rank() == 0:
            print(f"rank(s) {','.join(lost)} left; "
                  f"{dist.get_world_size()} ranks go on (recovered in "
                  f"{time.perf_counter() - start:.2f} s): "
                  f"{str(error).splitlines()[0][:120]}", flush=True)

    def step_done(self):
        """After each step: every GROW_EVERY, the members let replacements
        in. A failure there is a loss like any other."""
        self.place[2] += 1
        if self.place[2] % GROW_EVERY:
            return
        try:
            joined = self.elastic.grow()
        except RuntimeError as e:
            self.recover(e)
            return
        if joined:
            self.launch += [None] * joined
            self.renew()
            if dist.get_rank() == 0:
                print(f"{joined} rank(s) joined; {dist.get_world_size()} "
                      f"ranks go on", flush=True)


def elastic_epochs(args, module, optimizer, images, labels, test_images,
                   test_labels, joined):
    """--elastic: each step takes the next (launched ranks) * batch samples
    of the epoch's order, split evenly among the ranks there are; a step or
    evaluation that raises because ranks were lost is redone by the
    survivors."""
    job = Elastic(module, optimizer, joined, args.batch_size)
    n = len(labels)
    while job.place[0] <= args.epochs:
        epoch = int(job.place[0])
        order = torch.randperm(
            n, generator=torch.Generator().manual_seed(args.seed * 1000 +
                                                       epoch))
        start = time.perf_counter()
        loss_sum, seen = 0.0, 0
        while job.place[1] < n:
            rank, world = dist.get_rank(), dist.get_world_size()
            at = int(job.place[1])
            step = min(int(job.place[3]), n - at)
            lo, hi = at + step * rank // world, at + step * (rank + 1) // world
            # A rank without a sample in the epoch's last step takes part
            # with a loss weighted to nothing; weighted world/step, the
            # ranks' average gradient is the mean over the step's samples.
            batch = order[lo:hi] if hi > lo else order[at:at + 1]
            weight = world / step if hi > lo else 0.0
            try:
                optimizer.zero_grad()
                loss = F.cross_entropy(job.ddp(images[batch]), labels[batch],
                                       reduction="sum")
                (loss * weight).backward()
                optimizer.step()
            except RuntimeError as e:
                job.recover(e)
                continue
            if hi > lo:
                loss_sum += loss.item()
                seen += hi - lo
            job.place[1] += step
            job.step_done()
        seconds = time.perf_counter() - start
        try:
            accuracy = evaluate(job.ddp, test_images, test_labels,
                                dist.get_rank(), dist.get_world_size())
        except RuntimeError as e:
            job.recover(e)
            continue
        job.place[0] += 1
        job.place[1] = 0
        if dist.get_rank() == 0:
            print(f"epoch {epoch}: loss {loss_sum / max(seen, 1):.4f}, test "
                  f"accuracy {accuracy:.4f}, {n / seconds:.0f} samples/s "
                  f"(hoop, {dist.get_world_size()} ranks, elastic)",
                  flush=True)


def main():
    args = parse_args()
    from_hoop_run()
    if args.backend == "hoop" and not hasattr(dist.Backend, "HOOP"):
        # Installed with pip, hoop_torch registered "hoop" as torch was
        # imported; from a build tree (PYTHONPATH=build/python) it is not.
        import hoop_torch  # noqa: F401
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    if args.elastic and (args.backend != "hoop" or args.device != "cpu"):
        raise SystemExit("--elastic takes --backend hoop on the CPU")
    images, labels = load(args.data, "train", args.limit)
    test_images, test_labels = load(args.data, "t10k")
    images, labels = images.to(device), labels.to(device)
    test_images, test_labels = test_images.to(device), test_labels.to(device)
    torch.manual_seed(args.seed)
    model = MODELS[args.model]().to(device)
    # A replacement joins once it is ready to train: the members wait for
    # it from the moment they let it in.
    joined = False
    if args.elastic:
        from hoop_torch import elastic
        joined = elastic.joining()
    if joined:
        print("ready to join", flush=True)
        elastic.join()
    else:
        dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.elastic:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr,
                                    momentum=args.momentum)
        elastic_epochs(args, model, optimizer, images, labels, test_images,
                       test_labels, joined)
        dist.destroy_process_group()
        return
    model = DDP(model, device_ids=[device.index] if device.index is not None
                else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr,
                                momentum=args.momentum)
    sampler = DistributedSampler(range(len(labels)), num_replicas=world,
                                 rank=rank, shuffle=True, seed=args.seed)
    first = 1
    if args.checkpoint and os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        first = saved["epoch"] + 1
        if rank == 0:
            print(f"going on from {args.checkpoint} after epoch "
                  f"{saved['epoch']}", flush=True)
    for epoch in range(first, args.epochs + 1):
        sampler.set_epoch(epoch)
        dist.barrier()
        start = time.perf_counter()
        loss_sum, seen = 0.0, 0
        # The rank's samples in batches, indexed straight out of memory.
        for batch in BatchSampler(sampler, args.batch_size, drop_last=False):
            batch = torch.tensor(batch, device=device)
            x, y = images[batch], labels[batch]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(batch)
            seen += len(batch)
        dist.barrier()
        seconds = time.perf_counter() - start
        accuracy = evaluate(model, test_images, test_labels, rank, world)
        if rank == 0:
            rate = seen * world / seconds
            if args.json:
                print(json.dumps({"backend": args.backend,
                                  "model": args.model, "ranks": world,
                                  "epoch": epoch, "seconds": seconds,
                                  "samples_per_s": rate,
                                  "loss": loss_sum / seen,
                                  "test_accuracy": accuracy}), flush=True)
            else:
                print(f"epoch {epoch}: loss {loss_sum / seen:.4f}, test "
                      f"accuracy {accuracy:.4f}, {rate:.0f} samples/s "
                      f"({args.backend}, {world} ranks)", flush=True)
            if args.checkpoint:
                save(args.checkpoint, {"model": model.module.state_dict(),
                                       "optimizer": optimizer.state_dict(),
                                       "epoch": epoch})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
