#!/usr/bin/env python3
"""PyTorch DistributedDataParallel peer of hoop-train: the same model (the
MLP, or with --model cnn the CNN of PyTorch's MNIST example), data,
sampler, batch and optimiser, on CPU with the gloo backend and one thread per
rank.  Started once per rank with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set (bench/train_vs_ddp.py does it); rank 0 prints one JSON line
per epoch.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

# The trainer's normalisation (src/train/dataset.h).
MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndims = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndims)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndims).reshape(dims)


def load(data, prefix, limit):
    def path(kind):
        p = os.path.join(data, f"{prefix}-{kind}")
        return p if os.path.exists(p) else p + ".gz"
    x = read_idx(path("images-idx3-ubyte"))
    y = read_idx(path("labels-idx1-ubyte"))
    if limit:
        x, y = x[:limit], y[:limit]
    x = (torch.from_numpy(x.reshape(len(x), -1).astype(np.float32)) / 255.0
         - MEAN) / STD
    return x, torch.from_numpy(y.astype(np.int64))


class Net(nn.Module):
    """The CNN of PyTorch's MNIST example, as hoop-train --model cnn has it."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, training=self.training)
        return self.fc2(x)


def mlp(widths):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--hidden", default="200,200")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=0)
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = load(a.data, "train", a.train_limit)
    tx, ty = load(a.data, "t10k", 0)
    net = Net() if a.model == "cnn" else mlp(
        [x.shape[1]] + [int(w) for w in a.hidden.split(",")] + [10])
    model = DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    loss_fn = nn.CrossEntropyLoss()
    sampler = DistributedSampler(range(len(x)), num_replicas=world,
                                 rank=rank, shuffle=True, seed=a.seed)
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler)))
        dist.barrier()
        t0 = time.monotonic()
        loss_sum = 0.0
        for first in range(0, len(order), a.batch):
            idx = order[first:first + a.batch]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
        dist.barrier()
        seconds = time.monotonic() - t0
        model.eval()
        with torch.no_grad():
            test_acc = (model(tx).argmax(1) == ty).float().mean().item()
        model.train()
        if rank == 0:
            print(json.dumps({"epoch": epoch + 1, "seconds": seconds,
                              "samples_per_s": len(order) * world / seconds,
                              "loss": loss_sum / len(order),
                              "test_acc": test_acc}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
