#!/tmp/peers-venv/bin/python
"""Measurement 1: training throughput, cleave against PyTorch eager (and torch.compile), same models,
batch, optimizer (SGD lr 0.01 momentum 0.9), cross-entropy, synthetic inputs, warm-up excluded.

Usage: train_throughput.py [--reps 5] [--models mlp,cnn,gpt] [--threads 1,2] [--no-compile]
For each (model, threads) the sides run alternately, cleave, eager, compile, cleave, eager, ... `reps`
times; each run reports its own samples/s over the timed steps (cleave: from rank 0's metrics, the
time from the end of warm-up step W to the end of the last step; torch: perf_counter around the timed
steps). The medians and the median of the per-round ratios cleave/peer are printed, with the load
average before and after each block. Raw figures go to $OUT/train_throughput.json.
Before each run the driver waits (at most 120 s) until the machine is idle enough for it: one idle core for
1 thread, both for 2 (common.wait_quiet; GATE=0 turns it off); the idle fractions seen are kept in the raw file."""
import argparse
import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (CLEAVE, HERE, MAIN, OUT, PY, cleave_model_flops, fmt, gate_for, last_json, loadavg, median, run, save,
                    wait_quiet)

MODELS = {  # name: (batch, timed steps, gen args)
    "mlp": (128, 300, ["mlp", "--batch", "128"]),
    "cnn": (64, 40, ["cnn", "--batch", "64"]),
    "gpt": (8, 30, ["gpt", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "64", "--vocab", "1024",
                    "--batch", "8"]),
}
WARMUP = 10  # >= cleave's 8-batch synthetic pool, so no step times the making of random numbers


def compile_plan(model, work):
    batch, _, gen = MODELS[model]
    cir = os.path.join(work, f"{model}.cir")
    plan = os.path.join(work, f"{model}.cplan")
    if model == "cnn":  # the convnet of examples/fashion_cnn.cir (batch 64), as written there
        cir = os.path.join(MAIN, "examples", "fashion_cnn.cir")
    else:
        rc, out, err, _ = run([CLEAVE, "gen", *gen, "-o", cir])
        assert rc == 0, err
    rc, out, err, _ = run([CLEAVE, "compile", cir, "--train", "--loss", "softmax_cross_entropy",
                           "--optimizer", "sgd:lr=0.01,momentum=0.9", "-o", plan])
    assert rc == 0, err
    return plan


def cleave_rate(plan, model, threads, work):
    batch, steps, _ = MODELS[model]
    metrics = os.path.join(work, f"{model}-{threads}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    rc, out, err, wall = run([CLEAVE, "run", plan, "--data", "synthetic", "--steps", str(WARMUP + steps),
                              "--threads", str(threads), "--progress", "never", "--metrics", metrics])
    if rc != 0:
        return None, f"rc={rc}: {err[-500:]}"
    rows = [json.loads(l) for l in open(metrics)]
    dt = rows[-1]["elapsed_s"] - rows[WARMUP - 1]["elapsed_s"]
    return (len(rows) - WARMUP) * batch / dt, None


def torch_rate(model, threads, mode, timeout):
    batch, steps, _ = MODELS[model]
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    rc, out, err, wall = run([PY, os.path.join(HERE, "torch_train_bench.py"), model, str(batch), str(steps),
                              str(threads), mode, str(WARMUP)], env=env, timeout=timeout)
    if rc != 0:
        return None, None, f"rc={rc}: {err.strip().splitlines()[-1] if err.strip() else ''}"[:800], err
    r = last_json(out)
    return r["samples_per_s"], r["warmup_s"], None, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-timeout", type=int, default=420)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="peers2-train-", dir=OUT)
    results = []
    print(f"cleave {CLEAVE}; peer {PY}; warm-up {WARMUP} steps; {a.reps} alternating rounds; load {loadavg()}",
          flush=True)
    for model in a.models.split(","):
        plan = compile_plan(model, work)
        flops = cleave_model_flops(plan)
        for threads in map(int, a.threads.split(",")):
            block = {"model": model, "batch": MODELS[model][0], "threads": threads, "steps": MODELS[model][1],
                     "model_flops_per_step": flops, "load_before": loadavg(), "cleave": [], "eager": [],
                     "compile": [], "compile_warmup_s": [], "errors": []}
            use_compile = not a.no_compile
            if use_compile:  # prime inductor's cache (first compile), untimed
                r, w, e, err = torch_rate(model, threads, "compile", a.compile_timeout)
                block["compile_prime"] = {"warmup_s": w, "samples_per_s": r, "error": e}
                if e:
                    block["errors"].append(f"torch.compile: {e}")
                    block["compile_stderr_tail"] = err[-3000:]
                    use_compile = False
            gate = gate_for(threads)
            block["gate_idle_threshold"], block["idle_before_run"] = gate, []
            for rep in range(a.reps):
                block["idle_before_run"].append(wait_quiet(gate))
                c, e = cleave_rate(plan, model, threads, work)
                block["cleave"].append(c)
                e and block["errors"].append(f"cleave: {e}")
                block["idle_before_run"].append(wait_quiet(gate))
                t, _, e, _ = torch_rate(model, threads, "eager", 600)
                block["eager"].append(t)
                e and block["errors"].append(f"eager: {e}")
                if use_compile:
                    block["idle_before_run"].append(wait_quiet(gate))
                    t, w, e, _ = torch_rate(model, threads, "compile", a.compile_timeout)
                    block["compile"].append(t)
                    block["compile_warmup_s"].append(w)
                    e and block["errors"].append(f"compile: {e}")
            block["load_after"] = loadavg()
            for peer in ("eager", "compile"):
                pairs = [c / p for c, p in zip(block["cleave"], block[peer]) if c and p]
                block[f"ratio_vs_{peer}_pairs"] = pairs
                block[f"ratio_vs_{peer}_median"] = median(pairs)
            results.append(block)
            print(f"{model:4s} T={threads} batch={block['batch']:3d}  cleave {fmt(median(block['cleave']))}  "
                  f"eager {fmt(median(block['eager']))}  ratio {fmt(block['ratio_vs_eager_median'], 2)}  "
                  f"compile {fmt(median(block['compile']))}  ratio {fmt(block['ratio_vs_compile_median'], 2)}  "
                  f"load {block['load_before']} -> {block['load_after']}  errors {len(block['errors'])}", flush=True)
            print("   cleave runs:", [round(x) if x else x for x in block["cleave"]],
                  " eager runs:", [round(x) if x else x for x in block["eager"]],
                  " compile runs:", [round(x) if x else x for x in block["compile"]], flush=True)
            save(f"train_throughput{a.tag}.json", results)
    print("raw:", os.path.join(OUT, f"train_throughput{a.tag}.json"))


if __name__ == "__main__":
    main()
