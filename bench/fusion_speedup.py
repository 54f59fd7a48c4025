#!/usr/bin/env python3
"""Training steps with fused kernels against the same plans unfused (`cleave compile --fusion on|off`),
in the same run: the GPT of bench/peers/train_throughput.py (4 layers, 256 wide, seq 64, batch 8),
the fashion convnet (examples/fashion_cnn.cir, batch 64), and (--models gpt_rms, gpt_gelu) the GPT
with Llama's RMSNorm, or with its GELU, as PyTorch exports it, at 1 and 2 threads. Runs alternate
(unfused, fused, ...) and each figure is the median of --reps runs; the speed-up is the ratio of the
medians, and "paired" the median of each round's fused/unfused ratio (the two runs of a round, back to
back, share the host's load of the moment); the load average is printed beside.
Also: the losses of both plans step by step, the largest relative difference over the first 6 steps
(fusion must not change them beyond 1e-5) and over all of them (a last-bit difference of one step grows
as training goes on, as between runs at 1 and 2 threads), and the
bytes the kernels move per step by the cost model (`cleave inspect --json`: kernel_bytes, fused_nodes).
Needs only the build (no PyTorch). Usage: bench/fusion_speedup.py [--reps 5] [--threads 1,2]
[--models gpt,cnn,gpt_rms,gpt_gelu] [--breakdown] -> $OUT/fusion_speedup.json and a table on stdout. --breakdown also
prints each plan's milliseconds per step in matrix products and in the rest, by op (cleave run --trace), and
the ceiling: the unfused step over the fused plan's products alone, the most fusing the rest could give here."""
import argparse
import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from common import CLEAVE, MAIN, OUT, fmt, loadavg, median, run, save  # noqa: E402

MODELS = {  # name: (batch, timed steps, gen args or None for the example convnet)
    "gpt": (8, 30, ["gpt", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "64", "--vocab", "1024",
                    "--batch", "8"]),
    "cnn": (64, 30, None),
    # The same GPT with Llama's RMSNorm as PyTorch exports it (pow, reduce_mean, add, sqrt, div, mul,
    # mul), which the fused plan runs as rms_norm and rms_norm_grad inside fused nodes.
    "gpt_rms": (8, 30, ["gpt", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "64", "--vocab", "1024",
                        "--batch", "8", "--rms-norm"]),
    # The GPT with its GELU as PyTorch exports it below opset 20 (div by sqrt 2, erf, add, mul, mul),
    # which the fused plan runs as gelu with its slope, as the gpt model's.
    "gpt_gelu": (8, 30, ["gpt", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "64", "--vocab", "1024",
                         "--batch", "8", "--exported-gelu"]),
}
WARMUP = 10
PRODUCTS = ("matmul", "gemm", "fused_matmul", "sgd_matmul_update")  # ops whose time is mostly a GEMM


def compile_plans(model, work):
    batch, _, gen = MODELS[model]
    cir = os.path.join(MAIN, "examples", "fashion_cnn.cir")
    if gen:
        cir = os.path.join(work, f"{model}.cir")
        rc, _, err, _ = run([CLEAVE, "gen", *gen, "-o", cir])
        assert rc == 0, err
    plans = {}
    for fusion in ("off", "on"):
        plan = os.path.join(work, f"{model}-{fusion}.cplan")
        rc, _, err, _ = run([CLEAVE, "compile", cir, "--train", "--loss", "softmax_cross_entropy", "--batch", str(batch),
                             "--optimizer", "sgd:lr=0.01,momentum=0.9", "--fusion", fusion, "-o", plan])
        assert rc == 0, err
        plans[fusion] = plan
    return plans


def traffic(plan):
    """(kernel bytes per step, fused nodes, bytes they save) of rank 0's train program."""
    rc, out, err, _ = run([CLEAVE, "inspect", plan, "--json"])
    assert rc == 0, err
    rank = json.loads(out)["ranks"][0]
    return rank["kernel_bytes"], len(rank["fused_nodes"]), sum(n["bytes_saved"] for n in rank["fused_nodes"])


def step_rate(plan, model, threads, work):
    """(samples/s after the warm-up steps, the losses of every step)."""
    batch, steps, _ = MODELS[model]
    metrics = os.path.join(work, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    rc, _, err, _ = run([CLEAVE, "run", plan, "--data", "synthetic", "--steps", str(WARMUP + steps), "--threads",
                         str(threads), "--progress", "never", "--metrics", metrics])
    assert rc == 0, err[-800:]
    rows = [json.loads(line) for line in open(metrics)]
    elapsed = rows[-1]["elapsed_s"] - rows[WARMUP - 1]["elapsed_s"]
    return (len(rows) - WARMUP) * batch / elapsed, [r["loss"] for r in rows]


def time_by_op(plan, threads, work):
    """ms per training step by op (steps 2-4 of `cleave run --trace`): where fusion can still win."""
    trace = os.path.join(work, "trace.json")
    rc, _, err, _ = run([CLEAVE, "run", plan, "--data", "synthetic", "--steps", "6", "--threads", str(threads),
                         "--progress", "never", "--trace", trace])
    assert rc == 0, err[-800:]
    events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X"]
    steps = len({e.get("args", {}).get("step") for e in spans}) or 1
    totals = {}
    for e in spans:
        op = e["name"].split(" ")[0]
        totals[op] = totals.get(op, 0.0) + e["dur"] / 1000.0 / steps
    return totals


def print_breakdown(model, threads, plans, work):
    """The matrix products' ms per step and everything else's, unfused and fused, and the biggest rest
    (the fused plan's sgd_matmul_update counts as a product: it is the weight gradient's GEMM, with the
    SGD update summed into it and, with momentum, a pass over the weight)."""
    by_op = {fusion: time_by_op(plans[fusion], threads, work) for fusion in ("off", "on")}
    products = {}
    for fusion, label in (("off", "unfused"), ("on", "fused")):
        ops = by_op[fusion]
        products[fusion] = sum(ms for op, ms in ops.items() if op in PRODUCTS)
        rest = sum(ops.values()) - products[fusion]
        biggest = sorted(((ms, op) for op, ms in ops.items() if op not in PRODUCTS), reverse=True)[:6]
        print(f"  {model} {threads} thread(s) {label:8} products {products[fusion]:6.2f} ms, rest {rest:6.2f} ms: " +
              ", ".join(f"{op} {ms:.2f}" for ms, op in biggest))
    # The most fusion could give here: the unfused step against the fused plan's products alone (its
    # rest taking no time), on this host's balance of GEMM and elementwise speed.
    ceiling = sum(by_op["off"].values()) / products["on"]
    print(f"  {model} {threads} thread(s) ceiling  {ceiling:.2f}x (the unfused step over the fused products alone; "
          f"products {100 * products['off'] / sum(by_op['off'].values()):.0f}% of the unfused step)")
    return by_op


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="gpt,cnn")
    ap.add_argument("--breakdown", action="store_true",
                    help="also print each plan's ms per step by op from cleave run --trace (products and the rest)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fusion-", dir=OUT)
    results = {"loadavg_before": loadavg(), "rows": []}
    print(f"fused against unfused training steps, median of {args.reps} alternating runs; load average {loadavg()}")
    print(f"{'model':6} {'threads':>7} {'unfused/s':>10} {'fused/s':>10} {'speed-up':>9} {'paired':>7} {'loss diff 6':>11} {'all':>8} "
          f"{'MB/step unfused':>16} {'fused':>8} {'fused nodes':>12}")
    for model in args.models.split(","):
        plans = compile_plans(model, work)
        bytes_off, _, _ = traffic(plans["off"])
        bytes_on, nodes, saved = traffic(plans["on"])
        for threads in [int(t) for t in args.threads.split(",")]:
            rates = {"off": [], "on": []}
            losses = {}
            for _ in range(args.reps):
                for fusion in ("off", "on"):
                    rate, losses[fusion] = step_rate(plans[fusion], model, threads, work)
                    rates[fusion].append(rate)
            diffs = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses["on"], losses["off"])]
            diff, diff6 = max(diffs), max(diffs[:6])
            off, on = median(rates["off"]), median(rates["on"])
            paired = median([b / a for a, b in zip(rates["off"], rates["on"])])
            row = {"model": model, "threads": threads, "unfused_samples_per_s": off, "fused_samples_per_s": on,
                   "speedup": on / off, "paired_speedup": paired, "max_relative_loss_difference": diff,
                   "max_relative_loss_difference_6_steps": diff6,
                   "kernel_bytes_unfused": bytes_off,
                   "kernel_bytes_fused": bytes_on, "fused_nodes": nodes, "fused_bytes_saved": saved,
                   "runs": rates, "loadavg": loadavg()}
            if args.breakdown:
                row["ms_per_step_by_op"] = print_breakdown(model, threads, plans, work)
            results["rows"].append(row)
            print(f"{model:6} {threads:>7} {fmt(off):>10} {fmt(on):>10} {on / off:>8.2f}x {paired:>6.2f}x {diff6:>11.1e} {diff:>8.1e} "
                  f"{bytes_off / 1e6:>16.1f} {bytes_on / 1e6:>8.1f} {nodes:>12}   (load {loadavg()})")
    print("wrote", save("fusion_speedup.json", results))


if __name__ == "__main__":
    main()
