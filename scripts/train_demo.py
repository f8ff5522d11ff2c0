#!/usr/bin/env python3
"""Trains the bundled demo model (models/demo, docs/DEMO.md): a small Qwen3-Next (Gated DeltaNet
layers, gated full-attention layers, a sparse MoE with a gated shared expert in every layer) on the
King James Bible and the fortune collections.

    scripts/prepare_demo_data.sh .demo-data
    python3 scripts/train_demo_tokenizer.py --data .demo-data --out .demo-data/tokenizer.json
    python3 scripts/train_demo.py --data .demo-data --tokenizer .demo-data/tokenizer.json \\
        --out OUT --minutes 5 --max-epochs 6

Runs where torch and transformers (5.x) are: on the GPU when there is one (bf16 autocast; with
flash-linear-attention installed transformers uses its GDN kernels), else on the CPU (for tests:
--tiny, a few seconds). No network. Training is time-based: AdamW, linear warmup, then a cosine
decay over the given minutes (or --max-epochs passes over the data, if that comes first), so the
schedule ends when the training does. The validation loss is
measured every --eval-every steps on a fixed part of val.txt; the weights with the best one are
kept (the corpus is small: about 1.9 M tokens, one pass takes ~8 s on an H200, and the validation
loss rises after ~8 passes at a high learning rate: hence --max-epochs) and the whole of val.txt is scored at the end.

OUT gets (5 files, each < 16 MiB): config.json, generation_config.json and model.safetensors
(bf16) as transformers' save_pretrained writes them, tokenizer.json, and train_log.json (the
config, parameter counts, the loss curve, the validation losses, tokens seen, the environment).
"""
import argparse
import json
import math
import os
import platform
import random
import shutil
import sys
import time

import torch

SEPARATOR = "<|endoftext|>"

# The demo model: 6 layers (GDN, GDN, attention) x 2; hidden 256; vocab 4096 tied with the
# embedding. GDN: 2 key heads x 64, 4 value heads x 64 (GVA 2). Attention: 4 query heads,
# 2 KV heads, head_dim 64, a quarter of it rotary, output gate, q/k norms. MoE in every layer:
# 8 experts of width 96, top-2, plus a shared expert of width 128 with its sigmoid gate.
# 6.75 M parameters, 13.5 MB in bf16.
DEMO = dict(
    vocab_size=4096, hidden_size=256, num_hidden_layers=6, full_attention_interval=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
    linear_value_head_dim=64, linear_conv_kernel_dim=4,
    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=96,
    shared_expert_intermediate_size=128, intermediate_size=512, norm_topk_prob=True,
    decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=4096,
    tie_word_embeddings=True, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25})

# --tiny: the same structure at toy size, for a CPU test of the script and of the engine's loader.
TINY = dict(DEMO, hidden_size=64, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
            head_dim=32, linear_key_head_dim=32, linear_value_head_dim=32, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, intermediate_size=128, num_experts=4)


def log(msg):
    print(f"train_demo: {msg}", flush=True)


def load_split(path, tok, eos_id):
    """Token ids of every document of a split, each followed by <|endoftext|>."""
    with open(path, encoding="utf-8") as f:
        docs = [d.rstrip("\n") for d in f.read().split("\n" + SEPARATOR + "\n")]
    ids = []
    for enc in tok.encode_batch(docs):
        ids.extend(enc.ids)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.long)


def batches_of(data, seq, batch, gen):
    """Random windows of seq + 1 tokens (input and shifted labels)."""
    starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=gen)
    return torch.stack([data[s:s + seq + 1] for s in starts.tolist()])


@torch.no_grad()
def eval_loss(model, data, seq, device, autocast, max_windows=None):
    """Mean next-token loss over consecutive windows of seq + 1 tokens (each token once)."""
    model.eval()
    total, count = 0.0, 0
    n_windows = (data.numel() - 1) // seq
    if max_windows is not None:
        n_windows = min(n_windows, max_windows)
    chunk = 16
    for w0 in range(0, n_windows, chunk):
        rows = [data[w * seq:w * seq + seq + 1] for w in range(w0, min(w0 + chunk, n_windows))]
        x = torch.stack(rows).to(device)
        with autocast():
            logits = model(input_ids=x[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 x[:, 1:].reshape(-1), reduction="sum")
        total += float(loss)
        count += x[:, 1:].numel()
    model.train()
    return total / count, count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder with train.txt and val.txt (prepare_demo_data.sh)")
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json (train_demo_tokenizer.py)")
    ap.add_argument("--out", required=True, help="folder to write the model to")
    ap.add_argument("--minutes", type=float, default=5.0, help="training time (default 5)")
    ap.add_argument("--max-epochs", type=float, default=0,
                    help="stop after this many passes over train.txt, whichever of time and "
                         "epochs comes first (the schedule follows the nearer one); 0 = time only")
    ap.add_argument("--seq", type=int, default=512, help="tokens per training window (default 512)")
    ap.add_argument("--batch", type=int, default=64, help="windows per step (default 64)")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 2e-3)")
    ap.add_argument("--min-lr-ratio", type=float, default=0.1, help="final lr / peak lr (default 0.1)")
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--log-every", type=int, default=25, help="steps between loss log entries")
    ap.add_argument("--eval-every", type=int, default=100, help="steps between validation checks")
    ap.add_argument("--eval-windows", type=int, default=32, help="val windows per periodic check")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tiny", action="store_true", help="toy-sized model (CPU test of the script)")
    ap.add_argument("--experts", default="auto", choices=["auto", "grouped_mm", "eager"],
                    help="transformers' MoE implementation (default: grouped_mm if it runs, else eager)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    args = ap.parse_args()

    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def autocast():
        return torch.autocast(device_type=device, dtype=torch.bfloat16)

    try:
        import fla  # noqa: F401  (transformers picks it up for the GDN layers)
        fla_version = getattr(fla, "__version__", "installed")
    except ImportError:
        fla_version = None

    # Data.
    tok = Tokenizer.from_file(args.tokenizer)
    eos_id = tok.token_to_id(SEPARATOR)
    if eos_id is None:
        sys.exit(f"train_demo: {args.tokenizer} has no {SEPARATOR} token")
    arch = TINY if args.tiny else DEMO
    if tok.get_vocab_size() != arch["vocab_size"]:
        sys.exit(f"train_demo: the tokenizer has {tok.get_vocab_size()} tokens, the model "
                 f"{arch['vocab_size']}; retrain it with --vocab {arch['vocab_size']}")
    train = load_split(os.path.join(args.data, "train.txt"), tok, eos_id)
    val = load_split(os.path.join(args.data, "val.txt"), tok, eos_id)
    log(f"train {train.numel()} tokens, val {val.numel()} tokens, device {device}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}, fla {fla_version}")

    # Model.
    config = AutoConfig.for_model("qwen3_next", **arch, initializer_range=0.02, dtype="bfloat16",
                                  use_cache=True, pad_token_id=eos_id, bos_token_id=None,
                                  eos_token_id=eos_id, output_router_logits=False)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    n_expert = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    e = arch["num_experts"]
    n_active = n_params - n_expert + n_expert * arch["num_experts_per_tok"] // e
    log(f"qwen3_next {config.layer_types}, {n_params / 1e6:.2f} M parameters "
        f"({n_active / 1e6:.2f} M active per token), {2 * n_params / 1e6:.1f} MB in bf16")

    # transformers' default MoE path is torch's grouped_mm; if this torch / GPU cannot run it on
    # the f32 master weights, fall back to the per-expert loop ("eager") rather than fail later.
    experts_impl = args.experts
    if experts_impl == "auto":
        experts_impl = "grouped_mm"
        try:
            probe = batches_of(train, 32, 2, torch.Generator().manual_seed(0)).to(device)
            model.set_experts_implementation("grouped_mm")
            with autocast():
                model(input_ids=probe[:, :-1]).logits.float().sum().backward()
            model.zero_grad(set_to_none=True)
        except Exception as err:  # noqa: BLE001 (any failure of the fast path means: use eager)
            log(f"grouped_mm experts failed ({type(err).__name__}: {str(err)[:200]}); using eager")
            experts_impl = "eager"
            model.zero_grad(set_to_none=True)
    model.set_experts_implementation(experts_impl)
    log(f"experts implementation: {experts_impl}")

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=(device == "cuda"))

    def lr_at(step, frac):
        warm = min(1.0, (step + 1) / args.warmup_steps)
        cos = 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        return args.lr * warm * (args.min_lr_ratio + (1 - args.min_lr_ratio) * cos)

    # Training, time-based.
    budget = args.minutes * 60.0
    curve, val_curve = [], []
    best = (float("inf"), None, -1)  # (val loss, state on the CPU, step)
    step, tokens_seen = 0, 0
    model.train()
    t0 = time.time()
    token_budget = args.max_epochs * train.numel() if args.max_epochs > 0 else float("inf")
    while True:
        elapsed = time.time() - t0
        frac = max(elapsed / budget, tokens_seen / token_budget)
        if frac >= 1.0 and step > 0:
            break
        lr = lr_at(step, frac)
        for g in opt.param_groups:
            g["lr"] = lr
        x = batches_of(train, args.seq, args.batch, gen).to(device, non_blocking=True)
        with autocast():
            out = model(input_ids=x[:, :-1], output_router_logits=True)
            logits = out.logits.float()
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        loss = ce + config.router_aux_loss_coef * out.aux_loss.float()  # MoE load balancing
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += args.batch * args.seq
        if step % args.log_every == 0 or step == 1:
            entry = {"step": step, "seconds": round(time.time() - t0, 2), "tokens": tokens_seen,
                     "lr": lr, "loss": round(float(ce.detach()), 4),
                     "aux_loss": round(float(out.aux_loss.detach()), 4)}
            curve.append(entry)
            log(f"step {step:6d}  {entry['seconds']:7.1f} s  lr {lr:.2e}  loss {entry['loss']:.4f}  "
                f"aux {entry['aux_loss']:.3f}  {tokens_seen / max(1e-9, time.time() - t0) / 1e3:.0f} K tok/s")
        if step % args.eval_every == 0:
            v, _ = eval_loss(model, val, args.seq, device, autocast, args.eval_windows)
            val_curve.append({"step": step, "seconds": round(time.time() - t0, 2),
                              "tokens": tokens_seen, "val_loss": round(v, 4)})
            log(f"step {step:6d}  val loss {v:.4f} (first {args.eval_windows} windows)")
            if v < best[0]:
                best = (v, {k: t.detach().to("cpu", copy=True) for k, t in model.state_dict().items()}, step)
    train_seconds = time.time() - t0

    # The last weights unless an earlier check was better.
    v_last, _ = eval_loss(model, val, args.seq, device, autocast, args.eval_windows)
    kept_step = step
    if best[1] is not None and best[0] < v_last:
        model.load_state_dict(best[1])
        kept_step = best[2]
    log(f"kept the weights of step {kept_step} (last step {step})")
    val_loss, val_tokens = eval_loss(model, val, args.seq, device, autocast)
    log(f"validation loss {val_loss:.4f} ({val_tokens} tokens, perplexity {math.exp(val_loss):.2f})")

    # Save: bf16 safetensors + config as transformers writes them, the tokenizer, the log.
    os.makedirs(args.out, exist_ok=True)
    model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=eos_id,
                                               do_sample=False, max_new_tokens=256)
    model.save_pretrained(args.out, safe_serialization=True)
    shutil.copyfile(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
    train_log = {
        "script": "scripts/train_demo.py", "args": vars(args), "arch": arch,
        "parameters": n_params, "active_parameters_per_token": n_active,
        "train_tokens": train.numel(), "val_tokens": val.numel(),
        "steps": step, "kept_step": kept_step, "tokens_seen": tokens_seen,
        "experts_implementation": experts_impl,
        "epochs": round(tokens_seen / train.numel(), 2), "train_seconds": round(train_seconds, 1),
        "val_loss": round(val_loss, 4), "val_perplexity": round(math.exp(val_loss), 2),
        "loss_curve": curve, "val_curve": val_curve,
        "environment": {"device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
                        "python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "fla": fla_version},
    }
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(train_log, f, indent=1)
        f.write("\n")

    files = sorted(os.listdir(args.out))
    sizes = {f: os.path.getsize(os.path.join(args.out, f)) for f in files}
    for f in files:
        log(f"wrote {os.path.join(args.out, f)} ({sizes[f]} B)")
    if len(files) > 8 or max(sizes.values()) >= 16 << 20:
        sys.exit("train_demo: the output breaks the limits (at most 8 files, each < 16 MiB)")


if __name__ == "__main__":
    main()
