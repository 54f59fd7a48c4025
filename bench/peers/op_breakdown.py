#!/tmp/peers-venv/bin/python
"""Per-op time of one training step, cleave against PyTorch eager, to see where a gap comes from.
cleave: `cleave run PLAN --trace` (each instruction of steps 2-4; mean per step here); torch:
torch.profiler over 5 steps after 10 warm-up steps (self CPU time per aten op, per step).
Usage: op_breakdown.py MODEL THREADS   (MODEL: mlp | cnn | gpt) -> $OUT/breakdown-MODEL-tT.txt and stdout"""
import collections
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CLEAVE, HERE, MAIN, OUT, PY, loadavg, run  # noqa: E402

model, threads = sys.argv[1], int(sys.argv[2])
work = tempfile.mkdtemp(prefix="peers2-breakdown-", dir=OUT)
gen = {"mlp": ["mlp", "--batch", "128"], "gpt": ["gpt", "--layers", "4", "--hidden", "256", "--heads", "4", "--seq",
                                                 "64", "--vocab", "1024", "--batch", "8"]}
cir = os.path.join(MAIN, "examples", "fashion_cnn.cir")
if model != "cnn":
    cir = os.path.join(work, f"{model}.cir")
    run([CLEAVE, "gen", *gen[model], "-o", cir])
plan = os.path.join(work, f"{model}.cplan")
run([CLEAVE, "compile", cir, "--train", "--loss", "softmax_cross_entropy", "--optimizer", "sgd:lr=0.01,momentum=0.9",
     "-o", plan])
trace = os.path.join(work, "trace.json")
rc, out, err, _ = run([CLEAVE, "run", plan, "--data", "synthetic", "--steps", "12", "--threads", str(threads),
                       "--progress", "never", "--trace", trace])
assert rc == 0, err
events = json.load(open(trace))
events = events["traceEvents"] if isinstance(events, dict) else events
steps = {e["args"]["step"] for e in events if e.get("ph") == "X"}
per = collections.Counter()
for e in events:
    if e.get("ph") == "X":
        per[e["name"]] += e["dur"] / 1e3 / len(steps)
lines = [f"# {model} T={threads}, load {loadavg()}", f"## cleave (trace of steps {sorted(steps)}; ms per step by op)"]
total = sum(per.values())
lines += [f"{v:9.2f} ms {100 * v / total:5.1f}%  {k}" for k, v in per.most_common(25)]
lines.append(f"{total:9.2f} ms total of traced instructions")

code = r'''
import sys, runpy, torch
sys.argv = ["torch_train_bench.py", MODEL, BATCH, "1", THREADS, "eager", "10"]
from torch.profiler import profile, ProfilerActivity
import builtins
ns = runpy.run_path(HERE + "/torch_train_bench.py")
step = ns["step"]
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(5): step()
rows = sorted(prof.key_averages(), key=lambda r: -r.self_cpu_time_total)
tot = sum(r.self_cpu_time_total for r in rows) / 5 / 1e3
for r in rows[:25]:
    v = r.self_cpu_time_total / 5 / 1e3
    print(f"{v:9.2f} ms {100 * v / tot:5.1f}%  {r.key}")
print(f"{tot:9.2f} ms total self CPU per step")
'''
batch = {"mlp": "128", "cnn": "64", "gpt": "8"}[model]
code = code.replace("MODEL", repr(model)).replace("BATCH", repr(batch)).replace("THREADS", repr(str(threads)))
code = code.replace("HERE", repr(HERE))
env = dict(os.environ, OMP_NUM_THREADS=str(threads))
p = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env)
lines.append("## torch eager (torch.profiler, 5 steps; self CPU ms per step by aten op)")
lines += [l for l in p.stdout.splitlines() if "ms" in l] or [p.stderr[-1500:]]
text = "\n".join(lines)
print(text)
open(os.path.join(OUT, f"breakdown-{model}-t{threads}.txt"), "w").write(text + "\n")
