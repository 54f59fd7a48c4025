#!/usr/bin/python3
"""Reads cleave checkpoints in Python (numpy only): the checkpoint DIR/latest names, every tensor
merged whole from its blocks, each block's CRC-32 checked. Used by the end-to-end tests; the format
is described in runtime/train/checkpoint.h and docs/training.md.
Usage as a script: checkpoint_files.py DIR  (prints each tensor's name, kind, dtype and shape)"""
import json, os, struct, sys, zlib
import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    """(tensors by name as numpy arrays, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + size])
    data = blob[8 + size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return tensors, header.get("__metadata__", {})


def latest_path(ckpt_dir):
    """The folder (or older single file) DIR/latest names."""
    with open(os.path.join(ckpt_dir, "latest")) as f:
        name = f.read().strip()
    if name.endswith("/manifest.json"):
        name = name[: -len("/manifest.json")]
    return os.path.join(ckpt_dir, name)


def read_checkpoint(ckpt_dir, with_kinds=False):
    """Whole tensors by name of the checkpoint DIR/latest names; with_kinds: also {name: kind}."""
    path = latest_path(ckpt_dir)
    if path.endswith(".safetensors"):  # an older single-file checkpoint
        tensors, _ = read_safetensors(path)
        return (tensors, {name: "unknown" for name in tensors}) if with_kinds else tensors
    with open(os.path.join(path, "manifest.json")) as f:
        manifest = json.load(f)
    files = {}
    tensors, kinds = {}, {}
    for name, entry in manifest["tensors"].items():
        whole = None
        for block in entry["blocks"]:
            if block["file"] not in files:
                files[block["file"]] = read_safetensors(os.path.join(path, block["file"]))
            shard, metadata = files[block["file"]]
            saved = shard[name]
            crc = json.loads(metadata["blocks"])[name]["crc32"]
            if f"{zlib.crc32(saved.tobytes()):08x}" != crc:
                raise ValueError(f"{path}/{block['file']}: tensor {name}: CRC-32 mismatch")
            if whole is None:
                whole = np.zeros(entry["shape"], dtype=saved.dtype)
            box = tuple(slice(o, o + s) for o, s in zip(block["offset"], block["shape"]))
            whole[box] = saved
        # A tensor the plan held reshaped or grouped (a fused projection's weight under --tp): in the
        # model's shape and order.
        tensors[name] = model_order(whole, entry) if "model_shape" in entry else whole
        kinds[name] = entry["kind"]
    return (tensors, kinds) if with_kinds else tensors


def model_order(held, entry):
    """A whole tensor a plan held in another layout, in the model's (ir/held_layout.h): reshaped, or
    grouped: held is [G] + the model's shape with dim `model_part_axis` G times smaller, group g
    holding block g of each part."""
    if "model_parts" not in entry:
        return held.reshape(entry["model_shape"])
    axis, groups = entry["model_part_axis"], held.shape[0]
    pieces, start = [], 0
    for part in entry["model_parts"]:
        block = held.take(range(start // groups, (start + part) // groups), axis=axis + 1)
        pieces.append(np.moveaxis(block, 0, axis).reshape(
            block.shape[1:axis + 1] + (part,) + block.shape[axis + 2:]))
        start += part
    return np.concatenate(pieces, axis=axis)


if __name__ == "__main__":
    tensors, kinds = read_checkpoint(sys.argv[1], with_kinds=True)
    for name in sorted(tensors):
        print(name, kinds[name], tensors[name].dtype, list(tensors[name].shape))
