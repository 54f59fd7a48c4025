#!/usr/bin/python3
"""Checks that two runs logged the same losses (metrics JSONL, one object per step): bitwise, or
within a relative tolerance. A REFERENCE.json holding a list (a fixture's PyTorch losses) is
compared over the run's steps.
Usage: same_losses.py LABEL REFERENCE.jsonl|REFERENCE.json RUN.jsonl [TOLERANCE]   (exit 1 naming both lists when they differ)"""
import json
import sys

label, reference, run = sys.argv[1:4]
tolerance = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
b = [json.loads(line)["loss"] for line in open(run) if line.strip()]
if reference.endswith(".json"):
    a = json.load(open(reference))[: len(b)]
else:
    a = [json.loads(line)["loss"] for line in open(reference) if line.strip()]
if tolerance == 0:
    if not a or a != b:
        sys.exit(f"FAIL {label}: the reference's losses {a} but this run's {b}")
    print(f"ok   {label}: {len(b)} losses bitwise the same")
    sys.exit(0)
worst = max((abs(x - y) / abs(x) for x, y in zip(a, b)), default=float("inf"))
if not a or len(a) != len(b) or not worst <= tolerance:
    sys.exit(f"FAIL {label}: losses differ by up to {worst:.1e} (tolerance {tolerance:g}): the reference's {a}, this run's {b}")
print(f"ok   {label}: {len(b)} losses within {worst:.1e} of the reference")
