"""The peers' PyTorch versions of cleave's benchmark models, shared by bench/peers/torch_train_bench.py
and bench/torch_autocast_train.py: the MLP (784-512-512-10), the Fashion-MNIST convnet of
examples/fashion_cnn.cir, and `cleave gen gpt`'s GPT (its vocabulary head without bias)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


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
        s.T = T
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
