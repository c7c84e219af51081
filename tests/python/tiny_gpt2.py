"""A small GPT-2 in plain PyTorch (token and position embeddings, pre-LayerNorm blocks with
causal self-attention and a GELU MLP, a final LayerNorm and an LM head, untied unless `tied`:
then the head's weight is the token embedding's, as GPT-2's), written here for the zrt
package's tests and benchmark; independent of zrt-train's C++ model."""
import math

import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        # No bias: the key bias's gradient is zero in exact arithmetic (softmax ignores a shift),
        # so it is pure rounding noise, which Adam would scale up to full steps; any two
        # summation orders (one process, two ranks) would then disagree by a learning rate.
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT2(torch.nn.Module):
    def __init__(self, vocab=64, context=16, d=32, layers=2, heads=2, tied=False):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        if tied:
            self.head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def loss_of(model, idx):
    """Next-token cross entropy, mean over the batch's tokens."""
    logits = model(idx[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), idx[:, 1:].reshape(-1))


def batches(steps, batch, context, vocab, seed=1):
    """The same token batches on every rank: (steps, batch, context + 1)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (steps, batch, context + 1), generator=g)
