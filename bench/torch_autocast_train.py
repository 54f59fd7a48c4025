"""Peer: PyTorch 2.x training throughput in f32 and under torch.autocast(device_type="cpu",
dtype=torch.bfloat16), the models of cleave's `gen cnn` and `gen gpt` (bench/peers/torch_models.py):
SGD lr 0.01 momentum 0.9, cross entropy, one synthetic batch reused every step, WARMUP untimed steps.

Usage: torch_autocast_train.py MODEL BATCH STEPS THREADS f32|bf16 [WARMUP]
Prints one JSON line: {"samples_per_s": ..., "ms_per_step": ...}."""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from torch_models import GPT, ZalandoCNN  # noqa: E402

model_name, batch, steps, threads, precision = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
warmup = int(sys.argv[6]) if len(sys.argv) > 6 else 5
torch.set_num_threads(threads)
torch.manual_seed(0)


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
