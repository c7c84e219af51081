"""Measures what computing on views of the Engine's gathered copies saves at stage 3 (zrt/engine.py,
Engine._gather): one process, a 63 M-parameter GPT-2 (tiny_gpt2.py), parameters and optimizer on
the CPU, the first step's peak RSS above its start, for forward and for forward and backward.

  PYTHONPATH=build/python:tests/python python3 tests/python/stage3_saved_views_memory.py views|copy

`copy` gives every module a torch copy of its gathered parameters instead (what a module with a
frozen parameter gets). Either way a parameter or a view of one that autograd saves is kept as the
recipe to make it again (Engine._pack), which with views is what keeps backward from reading
memory the Engine has reused. docs/python.md quotes one measurement."""
import sys, torch, zrt
from tiny_gpt2 import GPT2, batches, loss_of
torch.manual_seed(0)
m = GPT2(vocab=4096, context=32, d=768, layers=8, heads=4)
n = sum(p.numel() for p in m.parameters())
e = zrt.initialize(model=m, config={"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_live_parameters": 8000000, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}})
if sys.argv[1] == "copy":
    e._views = [False] * len(e._views)
data = batches(3, 2, 32, 4096)
def rss(): return [int(l.split()[1]) // 1024 for l in open("/proc/self/status") if l.startswith("VmRSS")][0]
def hwm(): return [int(l.split()[1]) // 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
open("/proc/self/clear_refs", "w").write("5"); before = rss()
loss = loss_of(e, data[1]); fwd = hwm() - before
e.backward(loss); bwd = hwm() - before; e.step()
print(f"forward peak +{fwd} MiB, forward+backward peak +{bwd} MiB;", sys.argv[1], f"{n/1e6:.1f} M params ({n*4/2**20:.0f} MiB fp32): step peak RSS above its start {hwm()-before} MiB")
