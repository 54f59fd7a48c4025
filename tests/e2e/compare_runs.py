#!/usr/bin/python3
"""Compares two training runs of the same model: per-step losses (metrics JSONL) and the whole
tensors of their last checkpoints (safetensors), within a relative tolerance. Optimizer state
(momentum, Adam moments) gets 100x the tolerance: it accumulates raw gradients, and some gradients
are pure rounding noise (attention's key bias, whose true gradient is 0), which any change in
summation order changes completely.
Usage: compare_runs.py REF_DIR RUN_DIR TOLERANCE LABEL  (each DIR has metrics.jsonl and ckpt/)"""
import json, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_files import read_checkpoint  # noqa: E402


def running_statistics_difference(run_dir, expected_dir):
    """The largest absolute difference between the tensors of a run's last checkpoint and the
    expected ones (expected_dir/<name>.npy, as PyTorch's BatchNorm running statistics), and their count."""
    actual = tensors(run_dir)
    files = sorted(os.listdir(expected_dir))
    worst = max(float(np.abs(actual[f[:-4]].ravel() - np.load(os.path.join(expected_dir, f)).ravel()).max())
                for f in files)
    return worst, len(files)


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def tensors(run_dir):
    return read_checkpoint(os.path.join(run_dir, "ckpt"))


def main():
    ref_dir, run_dir, tolerance, label = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    failures = []
    ref_losses, run_losses = losses(ref_dir), losses(run_dir)
    if len(ref_losses) != len(run_losses):
        failures.append(f"{len(run_losses)} steps logged, the reference has {len(ref_losses)}")
    worst_loss = 0.0
    for step, (a, b) in enumerate(zip(ref_losses, run_losses), 1):
        rel = abs(a - b) / max(abs(a), 1e-12)
        worst_loss = max(worst_loss, rel)
        if rel > tolerance:
            failures.append(f"step {step}: loss {b!r} vs {a!r} (relative {rel:.2e})")
    ref, run = tensors(ref_dir), tensors(run_dir)
    if sorted(ref) != sorted(run):
        failures.append(f"checkpoint tensors differ: {sorted(set(ref) ^ set(run))}")
    worst_weight = worst_state = 0.0
    for name in sorted(set(ref) & set(run)):
        is_state = name.endswith((".momentum", ".exp_avg", ".exp_avg_sq"))
        limit = 100 * tolerance if is_state else tolerance
        a, b = ref[name].astype(np.float64), run[name].astype(np.float64)
        if a.shape != b.shape:
            failures.append(f"{name}: shape {b.shape} vs {a.shape}")
            continue
        # Relative in the 2-norm, with an absolute floor (RMS 1e-6) for tensors that are zero up to
        # rounding noise (the key bias momentum: norm ~2e-9, against ~2e-2 for the query bias).
        scale = max(float(np.linalg.norm(a)), 1e-6 * np.sqrt(a.size), 1e-12)
        rel = float(np.linalg.norm(a - b)) / scale
        if is_state:
            worst_state = max(worst_state, rel)
        else:
            worst_weight = max(worst_weight, rel)
        if rel > limit:
            failures.append(f"{name}: differs by {rel:.2e} of its norm")
    if failures:
        print(f"FAIL {label}:", *failures[:10], sep="\n  ")
        return 1
    print(f"ok   {label}: {len(run_losses)} losses within {worst_loss:.1e}, weights within {worst_weight:.1e}, "
          f"optimizer state within {worst_state:.1e} (of {len(run)} tensors)")
    return 0


if __name__ == "__main__":  # onnx_modern.sh imports tensors()
    sys.exit(main())
