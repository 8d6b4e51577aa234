#!/usr/bin/env python3
"""PyTorch DistributedDataParallel peer of hoop-train: the same model (the
MLP, or with --model cnn the CNN of PyTorch's MNIST example), data,
sampler, batch and optimiser, on CPU with the gloo backend and one thread per
rank.  Started once per rank with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set (bench/train_vs_ddp.py does it); rank 0 prints one JSON line
per epoch.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

# The data and the CNN of the example (normalised as src/train/dataset.h
# does), so that this peer trains what the example and hoop-train train.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" /
                       "examples"))
from ddp_mnist import CNN, load  # noqa: E402


def mlp(widths):
    layers = [nn.Flatten()]
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
    net = CNN() if a.model == "cnn" else mlp(
        [x[0].numel()] + [int(w) for w in a.hidden.split(",")] + [10])
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
