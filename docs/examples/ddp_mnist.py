#!/usr/bin/env python3
"""Data-parallel training with PyTorch DDP, as in PyTorch's DDP tutorial:
one process per rank, a DistributedSampler giving each rank its share of
Fashion-MNIST, DistributedDataParallel averaging the gradients, SGD. The
backend is one word: --backend gloo or --backend hoop (hoop_torch, once
installed, registers "hoop" when torch is imported).

    torchrun --standalone --nproc_per_node 2 docs/examples/ddp_mnist.py --backend hoop

--model mlp (784-200-200-10) or cnn (the network of PyTorch's MNIST
example); --device cuda trains on each rank's GPU (LOCAL_RANK). The data are the MNIST-format files Debian's dataset-fashion-mnist
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


def main():
    args = parse_args()
    if args.backend == "hoop" and not hasattr(dist.Backend, "HOOP"):
        # Installed with pip, hoop_torch registered "hoop" as torch was
        # imported; from a build tree (PYTHONPATH=build/python) it is not.
        import hoop_torch  # noqa: F401
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    images, labels = load(args.data, "train", args.limit)
    test_images, test_labels = load(args.data, "t10k")
    images, labels = images.to(device), labels.to(device)
    test_images, test_labels = test_images.to(device), test_labels.to(device)
    torch.manual_seed(args.seed)
    model = MODELS[args.model]().to(device)
    model = DDP(model, device_ids=[device.index] if device.index is not None
                else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr,
                                momentum=args.momentum)
    sampler = DistributedSampler(range(len(labels)), num_replicas=world,
                                 rank=rank, shuffle=True, seed=args.seed)
    for epoch in range(1, args.epochs + 1):
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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
