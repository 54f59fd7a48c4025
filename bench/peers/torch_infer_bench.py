#!/tmp/peers-venv/bin/python
"""Peer: PyTorch eager inference (torch.inference_mode, eval mode) of the models the ONNX benchmark
runs, built from the same code that made the .onnx files (weights: the same seeds).

Usage: torch_infer_bench.py MODEL THREADS ITERATIONS WARMUP
  MODEL: resnet18_64_b8 | resnet18_224_b1 | gpt17 (tests/fixtures/make_onnx.py's Gpt, batch 16) | gpt2_tiny_b4
Prints: "<model> batch B threads T: median M ms per batch over N runs (torch V eager)" and a JSON line."""
import importlib.util
import json
import os
import sys
import time

import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models  # noqa: E402  (resnet18(), gpt2(), LogitsOnly)

MAIN = os.environ.get("MAIN", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def build(name):
    if name == "resnet18_64_b8":
        return export_models.resnet18(), torch.randn(8, 3, 64, 64)
    if name == "resnet18_224_b1":
        return export_models.resnet18(), torch.randn(1, 3, 224, 224)
    if name == "gpt2_tiny_b4":
        return export_models.LogitsOnly(export_models.gpt2()), torch.randint(0, 2048, (4, 64))
    if name == "gpt17":
        spec = importlib.util.spec_from_file_location("make_onnx", os.path.join(MAIN, "tests/fixtures/make_onnx.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # defines the classes; main() is not run
        torch.manual_seed(0)
        return mod.Gpt().eval(), torch.randint(0, 64, (16, 16))
    raise SystemExit(f"unknown model {name}")


def main():
    name, threads, iterations, warmup = sys.argv[1], *map(int, sys.argv[2:5])
    torch.set_num_threads(threads)
    model, x = build(name)
    model.eval()
    times = []
    with torch.inference_mode():
        for i in range(warmup + iterations):
            t = time.perf_counter()
            model(x)
            if i >= warmup:
                times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    med = times[len(times) // 2]
    print(f"{name} batch {x.shape[0]} threads {threads}: median {med:.4f} ms per batch over {iterations} runs "
          f"(torch {torch.__version__} eager)")
    print(json.dumps({"model": name, "threads": threads, "median_ms": med, "iterations": iterations}))


if __name__ == "__main__":
    main()
