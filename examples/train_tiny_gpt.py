#!/usr/bin/python3
"""A tiny causal transformer pretrained on CPU from token volumes: a blend
of two sources read by dlfs.torch.TokenDataset, resumable mid-epoch.

    examples/train_tiny_gpt.py --steps 300               # builds the data, trains
    examples/train_tiny_gpt.py --steps 150 --save ck.pt  # stop half way ...
    examples/train_tiny_gpt.py --steps 300 --resume ck.pt  # ... and go on

The data: two corpora found on every Debian system, tokenised by bytes
(vocabulary 256, uint16 tokens): prose (the licence texts in
/usr/share/common-licenses) and code (the Python standard library), each
written as a token volume with dlfs.Writer(tokens="uint16"), one document
per file. The model reads a 60/40 blend of them (--weights) in windows of
--seq-len + 1 tokens laid across documents; cu_seqlens marks where
documents start (this model ignores it; a variable-length attention would
use it to keep documents apart). Every --log steps it prints the mean loss,
which falls from ln 256 = 5.5 towards 2. --save writes the model, the
optimiser and the dataset's state (a few hundred bytes: where the token
stream stands); --resume continues the same stream, on any number of
DataLoader workers.
"""
import argparse
import glob
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as tud

import dlfs
import dlfs.torch as dlfs_torch


def build_volume(path, files, limit_bytes):
    """Byte-level token volume of `files` (one document each), up to limit_bytes."""
    docs, total = [], 0
    for f in files:
        try:
            data = open(f, "rb").read()
        except OSError:
            continue
        if not data:
            continue
        docs.append(np.frombuffer(data, dtype=np.uint8))
        total += len(data)
        if total >= limit_bytes:
            break
    if not docs:
        sys.exit(f"train_tiny_gpt.py: no input files for {path}")
    tokens = np.concatenate(docs).astype(np.uint16)
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    with dlfs.Writer(path, tokens="uint16", force=True) as w:
        w.write_documents(tokens, lengths)
    print(f"{path}: {len(docs)} documents, {total:,} tokens")


class TinyGPT(nn.Module):
    def __init__(self, vocab=256, width=128, layers=2, heads=4, context=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(width, vocab)

    def forward(self, x):
        n = x.shape[1]
        causal = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        h = self.embed(x) + self.position(torch.arange(n))
        return self.head(self.blocks(h, mask=causal))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--data", default="/tmp/dlfs-tiny-gpt", help="where the volumes are made")
    ap.add_argument("--steps", type=int, default=300, help="optimiser steps in all")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--weights", default="0.6,0.4", help="prose,code shares of the blend")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    ap.add_argument("--log", type=int, default=25, help="print the mean loss every N steps")
    ap.add_argument("--save", help="write a checkpoint here at the end")
    ap.add_argument("--resume", help="continue from this checkpoint")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    os.makedirs(args.data, exist_ok=True)
    prose = os.path.join(args.data, "prose.dlfs")
    code = os.path.join(args.data, "code.dlfs")
    if not os.path.exists(prose):
        build_volume(prose, sorted(glob.glob("/usr/share/common-licenses/*")), 4 << 20)
    if not os.path.exists(code):
        build_volume(code, sorted(glob.glob(f"/usr/lib/python3*/*.py")), 8 << 20)
    w = [float(x) for x in args.weights.split(",")]
    torch.manual_seed(args.seed)
    ds = dlfs_torch.TokenDataset([(prose, w[0]), (code, w[1])], seq_len=args.seq_len,
                                 batch_size=args.batch_size, seed=args.seed)
    model = TinyGPT(context=args.seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    step, epoch = 0, 0
    in_epoch = 0  # batches of this iteration of the epoch (what state_dict counts)
    if args.resume:
        ck = torch.load(args.resume)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        ds.load_state_dict(ck["data"])
        step, epoch = ck["step"], ck["epoch"]
        print(f"resumed at step {step}, in epoch {epoch}")
    dl = tud.DataLoader(ds, batch_size=None, num_workers=args.workers)
    losses, started = [], time.perf_counter()
    while step < args.steps:
        ds.set_epoch(epoch)
        for item in dl:
            x = item["tokens"]
            logits = model(x[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            in_epoch += 1
            if step % args.log == 0:
                rate = len(losses) * x.numel() / (time.perf_counter() - started)
                print(f"step {step:5d}  epoch {epoch}  loss {np.mean(losses[-args.log:]):.3f}"
                      f"  ({rate:,.0f} tokens/s)", flush=True)
            if step >= args.steps:
                break
        else:
            epoch, in_epoch = epoch + 1, 0
            continue
        break
    if args.save:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "data": ds.state_dict(batches=in_epoch), "step": step, "epoch": epoch},
                   args.save)
        print(f"saved {args.save} at step {step}")
    if losses:
        print(f"loss: first {args.log} steps {np.mean(losses[:args.log]):.3f}, "
              f"last {args.log} {np.mean(losses[-args.log:]):.3f} (ln 256 = {math.log(256):.3f})")


if __name__ == "__main__":
    main()
