"""The README's first-screen training script (the ```python block that starts with "# train.py"),
run as it is under mpirun -np 2: it must end cleanly and train (its last loss below half an
untrained model's of the same shape)."""
import os
import re
import runpy
import sys
import tempfile

import torch

readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
with open(readme) as f:
    blocks = re.findall(r"```python\n(# train\.py\n.*?)```", f.read(), re.S)
if len(blocks) != 1:
    sys.exit(f"README.md: {len(blocks)} python blocks start with '# train.py'; expected one")
torch.manual_seed(0)
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "train.py")
    with open(path, "w") as f:
        f.write(blocks[0])
    seen = runpy.run_path(path, run_name="__main__")
engine, trained = seen["engine"], seen["loss"].item()
untrained = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
x = torch.randn(64, 64)
with torch.no_grad():
    before = torch.nn.functional.mse_loss(untrained(x), x).item()
if not trained < 0.5 * before:
    sys.exit(f"rank {engine.rank}: the README's script ended at loss {trained}; an untrained model gives {before}")
print(f"rank {engine.rank}: the README's script trained to loss {trained:.4f} (untrained: {before:.4f})")
