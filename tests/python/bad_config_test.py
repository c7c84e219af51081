"""A bad config raises a zrt.errors exception carrying the C++ message, which names the config
(the file's path, or "config" for a dict) and the key's JSON path; a wrong argument type raises
TypeError. One process: MPI starts as a singleton."""
import json
import os
import sys
import tempfile


import zrt
from tiny_gpt2 import GPT2


def expect(config, cls, needles):
    try:
        zrt.initialize(model=GPT2(), config=config)
    except cls as e:
        msg = str(e)
        print(f"{cls.__name__}: {msg}")
        for n in needles:
            assert n in msg, f"'{n}' not in: {msg}"
        return
    sys.exit(f"no {cls.__name__} for {config}")


good = {"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
bad_stage = dict(good, zero_optimization={"stage": 7})
expect(bad_stage, zrt.errors.InvalidArgument, ["zero_optimization.stage", "7"])
expect(dict(good, zero_optimization={"stag": 1}), zrt.errors.InvalidArgument, ["zero_optimization", "stag", "stage"])
expect(dict(good, optimizer={"type": "AdamW", "params": {"lr": "fast"}}), ValueError, ["optimizer.params.lr"])
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "ds_config.json")
    with open(path, "w") as f:
        json.dump(bad_stage, f)
    expect(path, zrt.errors.InvalidArgument, [path, "zero_optimization.stage"])
    with open(path, "w") as f:
        f.write('{"train_batch_size": 4,\n "zero_optimization": {"stage": 1,}}')
    expect(path, zrt.errors.InvalidArgument, [path, "line 2"])
expect(dict(good, zero_optimization={"stage": 1, "offload_param": {"device": "cpu"}}),
       zrt.errors.InvalidArgument, ["offload_param", "stage 3"])
# No optimizer section: refused (the C++ default, AdamW at lr 1e-3, is not what the script chose).
expect({"train_batch_size": 4}, zrt.errors.InvalidArgument, ["config", "no optimizer section"])
expect(dict(good, zrt={"device": "host-strict"}), zrt.errors.InvalidArgument,
       ["zrt.device host-strict:0 in config", "device host only"])
try:
    zrt.initialize(model=GPT2(), config=42)
except TypeError as e:
    print("TypeError:", e)
else:
    sys.exit("config=42 accepted")
# A good config still works after the failures.
engine = zrt.initialize(model=GPT2(), config=good)
assert engine.stage == 0 and engine.world_size == 1
print("ok")
