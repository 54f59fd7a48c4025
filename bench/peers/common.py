"""Shared helpers of the peer benchmarks in bench/peers: paths, load average, running a command, medians, raw output.
Defaults: the checkout this file sits in, its build/ (configured with -DCLEAVE_BUILD_BENCH=ON), the venv that
bench/setup_peers.sh makes."""
import json
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MAIN = os.environ.get("MAIN", os.path.dirname(os.path.dirname(HERE)))
CLEAVE = os.environ.get("CLEAVE", os.path.join(MAIN, "build", "tools", "cleave"))
BENCH_DIR = os.environ.get("BENCH_DIR", os.path.join(MAIN, "build", "bench"))
PY = os.environ.get("PY", os.path.join(os.environ.get("PEERS_VENV", "/tmp/peers-venv"), "bin", "python"))
OUT = os.environ.get("OUT", "/tmp/perf")
os.makedirs(OUT, exist_ok=True)


def loadavg():
    """The three load averages, as `uptime` prints them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(cmd, env=None, timeout=900, cwd=None):
    """Runs cmd (a list); returns (rc, stdout, stderr, wall seconds)."""
    e = dict(os.environ)
    if env:
        e.update(env)
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout, cwd=cwd)
        return p.returncode, p.stdout, p.stderr, time.perf_counter() - t
    except subprocess.TimeoutExpired as x:
        return 124, x.stdout or "", (x.stderr or "") + f"\n[timeout after {timeout}s]", time.perf_counter() - t


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in output:\n" + text[-2000:])


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:,.{nd}f}"


def save(name, obj):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    return path


def cleave_model_flops(plan):
    """model_flops of one step of `train` from `cleave simulate PLAN --cluster cpu-local --json`."""
    rc, out, err, _ = run([CLEAVE, "simulate", plan, "--cluster", "cpu-local", "--json"])
    if rc != 0:
        return None
    return json.loads(out)["model_flops"]


def idle_fraction(seconds=1.0):
    """Fraction of the machine's CPU time idle over `seconds` (from /proc/stat: idle + iowait)."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v[:8])
    i0, t0 = read()
    time.sleep(seconds)
    i1, t1 = read()
    return (i1 - i0) / max(t1 - t0, 1)


def wait_quiet(threshold, max_wait=120):
    """Waits until the machine is at least `threshold` idle over one second (other jobs share its 2 cores),
    at most max_wait seconds; returns (idle fraction seen last, seconds waited)."""
    start = time.time()
    while True:
        f = idle_fraction()
        if f >= threshold or time.time() - start > max_wait:
            return round(f, 2), round(time.time() - start, 1)
        time.sleep(1.0)


def gate_for(threads):
    """Idle fraction to wait for before a run of `threads` threads: one idle core for 1, both for 2.
    GATE=0 in the environment turns the gate off."""
    if os.environ.get("GATE", "1") == "0":
        return 0.0
    return 0.45 if threads == 1 else 0.85
