"""zrt.initialize on models people bring, built from `transformers` configs (nothing
downloaded; versions pinned in scripts/requirements-test.txt), on 2 ranks (mpirun -np 2) at
ZeRO stages 0, 1, 2, 3, 3 with parameters and optimizer on the CPU and 3 with both on NVMe,
against plain torch.optim.AdamW in one process on the same global batch: every step's loss on
each rank within 1e-5 (relative) of the reference's loss on the same micro-batch, and every
parameter after the last step within 1e-5 of the reference's (relative to its largest element),
but for the attention key biases (below).

    python3 transformers_matrix_test.py [MODEL ...]    (gpt2, bert, t5, opt, llama; default all)

Llama also trains with PEFT's LoRA adapters and activation checkpointing. After the last setting
(stage 3 with NVMe) the causal LMs generate() the tokens torch's trained model generates, and
every model's fp32_state_dict() goes through save_pretrained and from_pretrained to the same
values.

GPT-2, BERT, OPT and T5 tie their input embedding to the LM head (T5 shares one embedding
three ways; BERT ties the decoder's bias too): at stage 3 a tied parameter is stored once,
gathered for each module that uses it, and its gradients from every use are summed before its
one reduce. The models return Hugging Face ModelOutputs (dicts with the loss). Each rank prints
the time it took.

An attention key's bias adds the same amount to every score in a query's row, which softmax
ignores: its gradient is zero, computed as rounding noise (about 1e-11 here, where the other
biases' are 1e-4 and up), and Adam turns that noise into moves of about lr x noise / eps. Under
torch 1.13 the noise came out the same bit for bit in the reference and under ZRT; under torch
2.15 (8 Dec 2026) it did not, at stage 0 on one rank too, and those elements ended 30-40% apart
while every other element agreed within 1e-6. They are checked for staying within the moves Adam
can make (STEPS x lr) rather than against the reference: GPT-2's c_attn.bias holds the query,
key and value biases, and its key third is the one treated so."""
import os
import sys
import tempfile
import time

import torch
import transformers

import zrt
from torch_reference import state_of, train_whole_batch

STEPS, BATCH, CONTEXT, VOCAB, LR, WD = 3, 4, 12, 96, 1e-3, 0.01
TOLERANCE = 1e-5


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg), lambda m, x: m(input_ids=x, labels=x)


def bert():
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(cfg), lambda m, x: m(input_ids=x, labels=x)


def t5():
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
                                num_heads=2, relative_attention_num_buckets=8, dropout_rate=0.0,
                                decoder_start_token_id=0)
    half = CONTEXT // 2
    return transformers.T5ForConditionalGeneration(cfg), lambda m, x: m(input_ids=x[:, :half].contiguous(),
                                                                     labels=x[:, half:].contiguous())


def opt():
    cfg = transformers.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                                 num_attention_heads=2, max_position_embeddings=32, word_embed_proj_dim=32,
                                 dropout=0.0, attention_dropout=0.0)
    return transformers.OPTForCausalLM(cfg), lambda m, x: m(input_ids=x, labels=x)


def llama(**settings):
    """`settings`: more LlamaConfig arguments (torch_cuda_llama_test.py asks for eager attention)."""
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                                   **settings)
    return transformers.LlamaForCausalLM(cfg), lambda m, x: m(input_ids=x, labels=x)


def llama_lora():
    """PEFT's LoRA adapters on Llama's attention, the base frozen, with activation checkpointing
    (its forward runs again inside the backward)."""
    import peft
    model, loss_fn = llama()
    model.gradient_checkpointing_enable()
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    return model, loss_fn


MODELS = {"gpt2": gpt2, "bert": bert, "t5": t5, "opt": opt, "llama": llama, "llama-lora": llama_lora}
CAUSAL = {"gpt2", "opt", "llama"}
SETTINGS = [("stage 0", 0, None), ("stage 1", 1, None), ("stage 2", 2, None), ("stage 3", 3, None),
            ("stage 3 + cpu offload", 3, "cpu"), ("stage 3 + nvme offload", 3, "nvme")]


def build(kind):
    torch.manual_seed(0)
    model, loss_fn = MODELS[kind]()
    return model, lambda m, x: loss_fn(m, x).loss


def config(stage, world, offload, nvme):
    z = {"stage": stage, "stage3_param_persistence_threshold": 0}
    if offload:
        z["offload_optimizer"] = {"device": offload, "nvme_path": nvme}
        z["offload_param"] = {"device": offload, "nvme_path": nvme}
        if offload == "nvme":
            z["offload_param"]["max_in_cpu"] = 0
    return {"train_batch_size": BATCH, "train_micro_batch_size_per_gpu": BATCH // world,
            "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": WD}},
            "zero_optimization": z}


def reference(kind, data, world):
    """Plain torch AdamW in this process on the whole batch (torch_reference.py); returns each
    step's loss per micro-batch and the final parameters by name."""
    model, loss_of = build(kind)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    return train_whole_batch(model, opt, loss_of, data, world), state_of(model)


def after_training(kind, engine, model, got, want_params, data, rank):
    """generate() against torch's trained model; fp32_state_dict() through save_pretrained and
    from_pretrained."""
    failures = []
    trained, _ = build(kind)
    trained.load_state_dict(want_params)
    trained.eval()
    engine.eval()
    if kind in CAUSAL:
        prompt = data[0][:1, :4]
        with torch.no_grad():
            ours = model.generate(input_ids=prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
            theirs = trained.generate(input_ids=prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
        if not torch.equal(ours, theirs):
            failures.append(f"generate() gives {ours.tolist()}, torch's trained model {theirs.tolist()}")
    if kind != "llama-lora":
        with tempfile.TemporaryDirectory(prefix=f"zrt-matrix-{kind}-{rank}-saved-") as saved:
            model.save_pretrained(saved, state_dict=dict(got))  # save_pretrained drops tied names from it
            back = type(model).from_pretrained(saved)
        wrong = [k for k, v in back.state_dict().items() if not torch.equal(v, got[k])]
        if wrong:
            failures.append(f"save_pretrained/from_pretrained of fp32_state_dict(): {wrong[:3]} differ")
    return failures


def key_bias(name, numel):
    """The elements of parameter `name` that are an attention key's bias, as a slice (None: none)."""
    if name.endswith(("attention.self.key.bias", "self_attn.k_proj.bias")):
        return slice(0, numel)
    if name.endswith("attn.c_attn.bias"):  # GPT-2: query, key and value biases, a third each
        return slice(numel // 3, 2 * numel // 3)
    return None


def farthest(got, want):
    """The parameter farthest from the reference, relative to its largest element, over every
    element but the key biases'; and the key-bias elements' largest magnitude."""
    far, key_bias_max = ("", 0.0), 0.0
    for k, v in want.items():
        if k not in got:
            continue
        diff = (got[k] - v).abs().flatten()
        keys = key_bias(k, v.numel())
        if keys is not None:
            key_bias_max = max(key_bias_max, got[k].flatten()[keys].abs().max().item())
            diff[keys] = 0
        if diff.numel():
            rel = diff.max().item() / max(v.abs().max().item(), 1e-12)
            far = max(far, (k, rel), key=lambda kv: kv[1])
    return far, key_bias_max


def check(kind, rank, world):
    start = time.monotonic()
    g = torch.Generator().manual_seed(1)
    data = torch.randint(1, VOCAB, (STEPS, BATCH, CONTEXT), generator=g)
    want_losses, want_params = reference(kind, data, world)
    initial = build(kind)[0].state_dict()
    moved = max((want_params[k] - v).abs().max().item() for k, v in initial.items())
    if moved < 100 * TOLERANCE:
        return [f"{kind}: the reference's parameters moved {moved:.1e} in {STEPS} steps: "
                "the comparison would not see an engine that did not train"]
    failures = []
    with tempfile.TemporaryDirectory(prefix=f"zrt-matrix-{kind}-{rank}-") as nvme:
        for label, stage, offload in SETTINGS:
            model, loss_of = build(kind)
            engine = zrt.initialize(model=model, config=config(stage, world, offload, nvme))
            worst = 0.0
            for s in range(STEPS):
                loss = loss_of(engine, data[s].chunk(world)[rank])
                engine.backward(loss)
                engine.step()
                want = want_losses[s][rank]
                worst = max(worst, abs(loss.item() - want) / abs(want))
            if worst > TOLERANCE:
                failures.append(f"{label}: a step's loss is {worst:.2e} (relative) from torch's")
            got = engine.fp32_state_dict()
            if sorted(got) != sorted(want_params):
                failures.append(f"{label}: fp32_state_dict names {sorted(set(got) ^ set(want_params))[:4]} differ "
                                "from the model's state_dict")
            far, key_bias_max = farthest(got, want_params)
            if far[1] > TOLERANCE:
                failures.append(f"{label}: parameter {far[0]} is {far[1]:.2e} from torch's")
            if not key_bias_max <= STEPS * LR:
                failures.append(f"{label}: an attention key bias reached {key_bias_max:.2e}, beyond the "
                                f"{STEPS} x lr Adam can move it")
            if label == SETTINGS[-1][0]:
                failures += after_training(kind, engine, model, got, want_params, data, rank)
            engine.close()
            print(f"rank {rank}: {kind} {label}: loss within {worst:.1e}, parameters within {far[1]:.1e} of torch",
                  flush=True)
    print(f"rank {rank}: {kind}: {len(SETTINGS)} settings in {time.monotonic() - start:.1f} s", flush=True)
    return [f"{kind}: {f}" for f in failures]


def main():
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    start = time.monotonic()
    failures = []
    for kind in sys.argv[1:] or MODELS:
        failures += check(kind, rank, world)
    if failures:
        sys.exit(f"rank {rank}: " + "; ".join(failures))
    print(f"rank {rank}: ok: the matrix took {time.monotonic() - start:.1f} s")


if __name__ == "__main__":  # torch_cuda_llama_test.py imports its Llama and config
    main()
