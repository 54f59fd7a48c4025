#!/usr/bin/python3
"""Checks that two runs logged bitwise the same losses (metrics JSONL, one object per step).
Usage: same_losses.py LABEL REFERENCE.jsonl RUN.jsonl   (exit 1 naming both lists when they differ)"""
import json
import sys

label, reference, run = sys.argv[1:]
a = [json.loads(line)["loss"] for line in open(reference) if line.strip()]
b = [json.loads(line)["loss"] for line in open(run) if line.strip()]
if not a or a != b:
    sys.exit(f"FAIL {label}: the reference's losses {a} but this run's {b}")
print(f"ok   {label}: {len(b)} losses bitwise the same")
