"""Peer: PyTorch 2.x training throughput in f32 and under torch.autocast(device_type="cpu",
dtype=torch.bfloat16), the models of cleave's `gen cnn` and `gen gpt` (as ../shared/peers/current/
torch_train_bench.py defines them): SGD lr 0.01 momentum 0.9, cross entropy, one synthetic batch
reused every step, WARMUP untimed steps.

Usage: torch_autocast_train.py MODEL BATCH STEPS THREADS f32|bf16 [WARMUP]
Prints one JSON line: {"samples_per_s": ..., "ms_per_step": ...}."""
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

model_name, batch, steps, threads, precision = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
warmup = int(sys.argv[6]) if len(sys.argv) > 6 else 5
torch.set_num_threads(threads)
torch.manual_seed(0)


class ZalandoCNN(nn.Module):  # examples/fashion_cnn.cir: conv5x5 32, pool, conv5x5 64, pool, fc 1024, fc 10
    def __init__(s):
        super().__init__()
        s.c1 = nn.Conv2d(1, 32, 5, padding=2)
        s.c2 = nn.Conv2d(32, 64, 5, padding=2)
        s.f1 = nn.Linear(7 * 7 * 64, 1024)
        s.f2 = nn.Linear(1024, 10)

    def forward(s, x):
        x = F.max_pool2d(F.relu(s.c1(x)), 2)
        x = F.max_pool2d(F.relu(s.c2(x)), 2)
        return s.f2(F.relu(s.f1(x.flatten(1))))


class GPT(nn.Module):  # 4 layers, d=256, 4 heads, seq 64, vocab 1024, pre-norm, GELU MLP 4d
    def __init__(s, L=4, d=256, h=4, T=64, V=1024):
        super().__init__()
        s.emb = nn.Embedding(V, d)
        s.pos = nn.Parameter(torch.zeros(T, d))
        s.blocks = nn.ModuleList([nn.TransformerEncoderLayer(d, h, 4 * d, dropout=0.0, batch_first=True,
                                                             norm_first=True, activation="gelu")
                                  for _ in range(L)])
        s.ln = nn.LayerNorm(d)
        s.head = nn.Linear(d, V, bias=False)
        s.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))

    def forward(s, idx):
        x = s.emb(idx) + s.pos
        for b in s.blocks:
            x = b(x, src_mask=s.mask)
        return s.head(s.ln(x)).flatten(0, 1)


if model_name == "gpt":
    model, x, y = GPT(), torch.randint(0, 1024, (batch, 64)), torch.randint(0, 1024, (batch * 64,))
else:
    model, x, y = ZalandoCNN(), torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
model.train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def step():
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = F.cross_entropy(model(x).float(), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


for _ in range(warmup):
    step()
start = time.perf_counter()
for _ in range(steps):
    step()
seconds = time.perf_counter() - start
print(json.dumps({"samples_per_s": batch * steps / seconds, "ms_per_step": 1e3 * seconds / steps}))
