#!/usr/bin/python3
"""PyTorch training throughput on one GPU, the models of ../shared/peers/torch_train_bench.py (the
CPU peer) and cleave gen's defaults: fp32 without TF32 (cleave's GPU GEMMs are plain fp32),
SGD lr 0.01 momentum 0.9, cross entropy, synthetic inputs resident on the GPU.
Usage: torch_gpu_train_bench.py MODEL BATCH STEPS   (MODEL: cnn | gpt)
Prints one line: "... N samples/s (M ms/step)" after 3 warm-up steps."""
import sys, time, torch, torch.nn as nn, torch.nn.functional as F

model_name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")

class ZalandoCNN(nn.Module):  # the Fashion-MNIST benchmark convnet (cleave gen cnn)
    def __init__(s):
        super().__init__(); s.c1 = nn.Conv2d(1, 32, 5, padding=2); s.c2 = nn.Conv2d(32, 64, 5, padding=2)
        s.f1 = nn.Linear(7 * 7 * 64, 1024); s.f2 = nn.Linear(1024, 10)
    def forward(s, x):
        x = F.max_pool2d(F.relu(s.c1(x)), 2); x = F.max_pool2d(F.relu(s.c2(x)), 2)
        return s.f2(F.relu(s.f1(x.flatten(1))))

class GPT(nn.Module):  # cleave gen gpt's defaults: 4 layers, d=256, 4 heads, seq 64, vocab 1024
    def __init__(s, L=4, d=256, h=4, T=64, V=1024):
        super().__init__(); s.emb = nn.Embedding(V, d); s.pos = nn.Parameter(torch.zeros(T, d))
        s.blocks = nn.ModuleList([nn.TransformerEncoderLayer(d, h, 4 * d, dropout=0.0, batch_first=True,
                                                             norm_first=True, activation="gelu") for _ in range(L)])
        s.ln = nn.LayerNorm(d); s.head = nn.Linear(d, V)
        s.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))
    def forward(s, idx):
        x = s.emb(idx) + s.pos
        for b in s.blocks: x = b(x, src_mask=s.mask)
        return s.head(s.ln(x)).flatten(0, 1)

if model_name == "gpt":
    m = GPT().to(dev); x = torch.randint(0, 1024, (batch, 64), device=dev); y = torch.randint(0, 1024, (batch * 64,), device=dev)
elif model_name == "cnn":
    m = ZalandoCNN().to(dev); x = torch.randn(batch, 1, 28, 28, device=dev); y = torch.randint(0, 10, (batch,), device=dev)
else:
    sys.exit(f"unknown model {model_name} (cnn or gpt)")
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
def step():
    opt.zero_grad(set_to_none=True); loss = F.cross_entropy(m(x), y); loss.backward(); opt.step()
for _ in range(3): step()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(steps): step()
torch.cuda.synchronize()
dt = time.perf_counter() - t
print(f"torch {torch.__version__} {model_name} batch={batch} on {torch.cuda.get_device_name()}: "
      f"{steps * batch / dt:.1f} samples/s ({dt / steps * 1e3:.2f} ms/step)")
