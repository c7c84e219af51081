#!/usr/bin/env python3
"""Writes the generated seeds of corpus/checkpoint_manifest and corpus/safetensors: valid files in
the layouts ZRT writes (runtime/checkpoint/manifest.cpp toJson, safetensors.cpp's writer), so
the fuzzers start from inputs that pass every check. Run from anywhere; rewrites the files."""
import json
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def even_split(numel, world):
    """Rank r's [begin, count) of a buffer of numel elements, as the stage rules split it."""
    per = (numel + world - 1) // world
    out = []
    for r in range(world):
        begin = min(r * per, numel)
        out.append((begin, min(per, numel - begin)))
    return out


def manifest(world, stage, dtype, optimizer, trainable, frozen, states):
    params, offset = [], 0
    for module, name, shape, numel in trainable:
        params.append(dict(module=module, name=name, shape=shape, dtype=dtype, trainable=True,
                           group=0, offset=offset, numel=numel))
        offset += numel
    trainable_numel, offset = offset, 0
    for module, name, shape, numel in frozen:
        params.append(dict(module=module, name=name, shape=shape, dtype=dtype, trainable=False,
                           group=0, offset=offset, numel=numel))
        offset += numel
    frozen_numel = offset
    state_list, files = [], []
    for state, buffer, state_dtype in states:
        numel = trainable_numel if buffer == "trainable" else frozen_numel
        state_list.append(dict(name=state, buffer=buffer, dtype=state_dtype, numel=numel))
        for rank, (begin, count) in enumerate(even_split(numel, world)):
            files.append(dict(path=f"{state}.rank{rank}.bin", state=state, rank=rank, begin=begin,
                              count=count, bytes=count * ELEMENT_BYTES[state_dtype],
                              xxh3_64="%016x" % (0x1234567890ABCDEF + rank)))
    files.append(dict(path="engine_state.json", state="engine", rank=0, begin=0, count=0,
                      bytes=412, xxh3_64="00ff00ff00ff00ff"))
    return {"format": "zrt-checkpoint", "format_version": 1, "tag": "global_step20",
            "world_size": world, "zero_stage": stage, "training_dtype": dtype,
            "optimizer": optimizer, "byte_order": "little",
            "buffers": {"trainable": {"numel": trainable_numel}, "frozen": {"numel": frozen_numel}},
            "parameters": params, "states": state_list, "files": files}


def safetensors(tensors, metadata=None, pad=True):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:  # the data starts 8-byte aligned, as the reference writer (and ZRT's) leaves it
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(xs):
    return struct.pack("<%df" % len(xs), *xs)


def f16(xs):
    return struct.pack("<%de" % len(xs), *xs)


def bf16(xs):
    return b"".join(struct.pack("<f", x)[2:] for x in xs)  # the high half of each fp32


def main():
    adam = [("master", "trainable", "fp32"), ("exp_avg", "trainable", "fp32"),
            ("exp_avg_sq", "trainable", "fp32")]
    manifests = {
        "stage3_two_ranks_adamw.json": (manifest(
            2, 3, "bf16", "adamw",
            [("blocks.0", "attn.qkv.weight", [12, 4], 48), ("blocks.0", "attn.qkv.bias", [12], 12),
             ("head", "weight", [5, 4], 20)], [],
            [("params", "trainable", "bf16")] + adam), 2),
        "stage2_three_ranks_frozen.json": (manifest(
            3, 2, "fp16", "adam", [("encoder", "w", [10], 10)], [("embed", "table", [2, 3], 6)],
            [("params", "trainable", "fp16"), ("frozen_params", "frozen", "fp16")] + adam), None),
        "stage0_one_rank_sgd.json": (manifest(
            1, 0, "fp32", "sgd", [("m", "w", [7], 7), ("m", "scalar", [], 1)], [],
            [("params", "trainable", "fp32"), ("momentum_buffer", "trainable", "fp32")]), 1),
    }
    os.makedirs(os.path.join(HERE, "checkpoint_manifest"), exist_ok=True)
    for name, (m, indent) in manifests.items():
        with open(os.path.join(HERE, "checkpoint_manifest", name), "w") as f:
            f.write(json.dumps(m, indent=indent) + "\n")

    files = {
        "three_dtypes.safetensors": safetensors(
            [("blocks.0.attn.weight", "F32", [2, 3], f32([1, -2, 3.5, 0, 1e-3, -7])),
             ("blocks.0.attn.bias", "F16", [3], f16([0.5, -1, 2])),
             ("head.weight", "BF16", [2, 2], bf16([1, 2, -3, 0.25]))],
            {"format": "pt", "zrt_step": "20"}),
        "scalar_and_empty.safetensors": safetensors(
            [("scale", "F32", [], f32([2.0])), ("empty", "F16", [0, 4], b"")]),
        "unpadded_no_metadata.safetensors": safetensors([("w", "F32", [4], f32([1, 2, 3, 4]))], pad=False),
    }
    os.makedirs(os.path.join(HERE, "safetensors"), exist_ok=True)
    for name, blob in files.items():
        with open(os.path.join(HERE, "safetensors", name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
