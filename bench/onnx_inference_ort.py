"""The peer of bench/onnx_inference_bench.cpp: times an ONNX model's inference on ONNX Runtime's CPU
provider, with the same batch, thread count, runs and random inputs.

Usage: python onnx_inference_ort.py MODEL.onnx BATCH THREADS ITERATIONS WARMUP
Prints one line: "<model> batch B threads T: median M ms per batch over N runs (onnxruntime V)".
"""
import sys
import time

import numpy as np
import onnxruntime


def main():
    model, batch, threads, iterations, warmup = sys.argv[1], *map(int, sys.argv[2:6])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds = {}
    for value in session.get_inputs():
        shape = [batch if i == 0 and not isinstance(d, int) else d for i, d in enumerate(value.shape)]
        if value.type == "tensor(float)":
            feeds[value.name] = rng.uniform(-1, 1, shape).astype(np.float32)
        else:  # token ids: small non-negative integers, valid for any embedding
            feeds[value.name] = rng.integers(0, 2, shape).astype(np.int64)
    times = []
    for i in range(warmup + iterations):
        start = time.perf_counter()
        session.run(None, feeds)
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1000)
    times.sort()
    print(f"{model} batch {batch} threads {threads}: median {times[len(times) // 2]:.4f} ms per batch over "
          f"{iterations} runs (onnxruntime {onnxruntime.__version__})")


if __name__ == "__main__":
    main()
