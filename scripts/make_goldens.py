#!/usr/bin/env python3
"""Makes tiny random Hugging Face checkpoints (bf16 weights) of every architecture the engine runs,
with transformers' own f32 logits and greedy tokens, under tests/data/models/<name>/ (issue 5:
parity with transformers; read by tests/unit/parity_test.cpp).

  python3 -m venv /tmp/gvenv && /tmp/gvenv/bin/pip install torch transformers safetensors numpy
  /tmp/gvenv/bin/python scripts/make_goldens.py [name ...]

Per model folder (ENGINE_API.md):
  config.json        as transformers' save_pretrained writes it, with inf as a bare Infinity (as the
                     published configs; transformers 5 writes {"__float__": "Infinity"}); Nemotron-H
                     also gets the published hybrid_override_pattern and num_hidden_layers, which
                     transformers 5 derives from layers_block_type;
  model.safetensors  every tensor bf16, as save_pretrained writes it (published tensor names;
                     qwen3_5_moe's experts fused as published, see FUSED_EXPERTS);
  logits.npy         float32 [80, vocab]: transformers' logits of the 80-token prompt;
  golden.json        {"versions": {...}, "prompt_ids": [80 ids], "greedy_ids": [16 ids after the
                     prompt], "logits_file": "logits.npy", ...} plus the margins described below.

The reference runs in f32 on the CPU from the bf16 weights (loaded back from the folder with
from_pretrained(dtype=float32)), with eager attention and transformers' torch paths (fla,
causal-conv1d and mamba_ssm must NOT be installed: the script refuses to run when they are).
greedy_ids come from full forwards of prompt + tokens so far (argmax of the last row; ties go to
the lowest id, torch.argmax's rule), and are checked against generate() with the cache (the
decode path). Weights: transformers' init at initializer_range 0.06, then every tensor that init
leaves constant (norm weights, D, biases, the router's correction bias) gets N(0, 0.1) noise so
that a wrong (1 + w) / w or a dropped bias shows.

Near ties: a bf16 engine cannot be asked to reproduce an argmax whose top-2 margin is within its
rounding. The prompt is drawn from seeds 0, 1, 2, ... until every greedy step's margin
(top1 - top2) is at least MIN_GREEDY_MARGIN times that row's logit std; golden.json records
greedy_margins (per greedy step) and prompt_margins (per prompt position), both in units of the
row's std, for tests that exempt near ties. Deterministic (fixed seeds).
"""
import json
import os
import platform
import shutil
import sys

import numpy as np
import safetensors
import torch
import transformers
from safetensors import safe_open

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "data", "models")
PROMPT_LEN = 80
N_GREEDY = 16
PREFILL_CHUNK = 64  # what the parity test passes to generate_greedy
VOCAB = 512
INIT_RANGE = 0.06
MIN_GREEDY_MARGIN = 0.05
MAX_PROMPT_TRIES = 32

QWEN_ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}

# name -> (model_type, config kwargs). Dimensions are tiny; the structure is the real models'.
MODELS = {
    # Qwen3-Next: GDN x3 + gated attention, every layer MoE with a gated shared expert.
    # GDN GVA ratio 2 (Hk=2, Hv=4), K = V = 64.
    "qwen3_next_gva2_k64": ("qwen3_next", dict(
        hidden_size=64, num_hidden_layers=4, vocab_size=VOCAB, full_attention_interval=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rope_parameters=dict(QWEN_ROPE), rms_norm_eps=1e-6,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
        linear_value_head_dim=64, linear_conv_kernel_dim=4,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, intermediate_size=96, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)),
    # GVA ratio 3 (Hk=2, Hv=6), K = 128 != V = 64; layer 2 is a dense MLP (mlp_only_layers);
    # attention head_dim 128.
    "qwen3_next_gva3_k128_v64": ("qwen3_next", dict(
        hidden_size=64, num_hidden_layers=4, vocab_size=VOCAB, full_attention_interval=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=128,
        rope_parameters=dict(QWEN_ROPE), rms_norm_eps=1e-6,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=128,
        linear_value_head_dim=64, linear_conv_kernel_dim=4,
        num_experts=6, num_experts_per_tok=3, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, intermediate_size=96, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[2], tie_word_embeddings=False)),
    # Qwen3.5 dense (text model): separate in_proj_qkv / z / b / a, M-RoPE sections (text-only:
    # 1-D RoPE), tied embeddings as the small published Qwen3.5 models.
    "qwen3_5_dense": ("qwen3_5_text", dict(
        hidden_size=64, num_hidden_layers=4, vocab_size=VOCAB,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=128,
        rope_parameters=dict(QWEN_ROPE, mrope_interleaved=True, mrope_section=[3, 3, 2]),
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
        linear_value_head_dim=64, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
        tie_word_embeddings=True)),
    # Qwen3.5 MoE (text model): fused experts (gate_up_proj [E, 2I, H]), gated shared expert.
    "qwen3_5_moe": ("qwen3_5_moe_text", dict(
        hidden_size=64, num_hidden_layers=4, vocab_size=VOCAB,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rope_parameters=dict(QWEN_ROPE, mrope_interleaved=True, mrope_section=[3, 3, 2]),
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
        linear_value_head_dim=64, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, tie_word_embeddings=False)),
    # Mamba-2: 8 heads x 16, state 16, n_groups 2, SSD chunk 64 (< the 80-token prompt).
    "mamba2_g2": ("mamba2", dict(
        hidden_size=64, num_hidden_layers=3, vocab_size=VOCAB, num_heads=8, head_dim=16,
        state_size=16, n_groups=2, expand=2, conv_kernel=4, chunk_size=64, use_bias=False,
        use_conv_bias=True, layer_norm_epsilon=1e-5, rms_norm=True, residual_in_fp32=True,
        tie_word_embeddings=True)),
    # Nemotron-H: every block kind (M Mamba-2, * attention without RoPE (head_dim 64: a head dim the
    # CUDA attention kernels are built for), - relu2 MLP, E MoE with
    # sigmoid router + correction bias, shared expert, routed_scaling_factor).
    "nemotron_h_all": ("nemotron_h", dict(
        hidden_size=64, vocab_size=VOCAB, hybrid_override_pattern="ME*M-E",
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=96,
        mlp_hidden_act="relu2", mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16,
        n_groups=2, expand=2, conv_kernel=4, chunk_size=64, use_conv_bias=True,
        mamba_proj_bias=False, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, moe_shared_expert_intermediate_size=48, n_shared_experts=1,
        routed_scaling_factor=2.5, n_group=1, topk_group=1, norm_topk_prob=True,
        layer_norm_epsilon=1e-5, tie_word_embeddings=False)),
}


# Stored with fused experts as the published Qwen3.5 MoE checkpoints are (experts.gate_up_proj
# [E, 2I, H] = [gate; up], experts.down_proj [E, H, I]); transformers 5 writes them per expert.
FUSED_EXPERTS = {"qwen3_5_moe"}


def fuse_experts(path):
    import re
    from safetensors.torch import load_file, save_file
    sd = load_file(path)
    out, experts = {}, {}
    for k, v in sd.items():
        m = re.match(r"(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$", k)
        if m:
            experts.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = v
        else:
            out[k] = v
    for prefix, d in experts.items():
        n = 1 + max(e for e, _ in d)
        out[prefix + ".gate_up_proj"] = torch.stack(
            [torch.cat([d[(e, "gate")], d[(e, "up")]], 0) for e in range(n)]).contiguous()
        out[prefix + ".down_proj"] = torch.stack([d[(e, "down")] for e in range(n)]).contiguous()
    save_file(out, path, metadata={"format": "pt"})


def versions():
    return {
        "script": "scripts/make_goldens.py",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
    }


def refuse_fast_kernels():
    import importlib.util
    found = [m for m in ("fla", "causal_conv1d", "mamba_ssm", "kernels")
             if importlib.util.find_spec(m) is not None]
    if found:
        sys.exit(f"make_goldens: uninstall {', '.join(found)}: the goldens use transformers' torch paths")


def make_config(model_type, kw):
    from transformers import AutoConfig
    kw = dict(kw, initializer_range=INIT_RANGE, dtype="bfloat16", use_cache=True,
              pad_token_id=0, bos_token_id=None, eos_token_id=None)
    return AutoConfig.for_model(model_type, **kw)


def randomize_constants(model, gen):
    """Gives every tensor that init left constant (all elements equal) N(0, 0.1) noise."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * 0.1)
            elif p.numel() == 1:
                p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * 0.1)


def row_margin(row):
    """(top1 - top2) / std of one logit row, in f64."""
    r = row.double()
    top = torch.topk(r, 2).values
    return float((top[0] - top[1]) / r.std())


def greedy(model, prompt, n):
    """Greedy by full forwards: returns (tokens, margins in units of the row std)."""
    ids = list(prompt)
    margins = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            margins.append(row_margin(logits))
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], margins


def generate_with_cache(model, prompt, n):
    from transformers import GenerationConfig
    gc = GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                          pad_token_id=0, bos_token_id=None)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), generation_config=gc,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return [int(t) for t in out[0, len(prompt):]]


def plain_floats(v):
    """transformers 5 writes inf as {"__float__": "Infinity"}; published configs (and Python's json)
    carry a bare Infinity, e.g. Mamba2's time_step_limit [0.0, Infinity]."""
    if isinstance(v, dict):
        if set(v) == {"__float__"}:
            return float(v["__float__"])
        return {k: plain_floats(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain_floats(x) for x in v]
    return v


def make(name):
    from transformers import AutoModelForCausalLM
    model_type, kw = MODELS[name]
    out = os.path.join(OUT, name)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)

    # 1. Random init (f32), constants randomized, stored bf16.
    seed = sum(ord(c) for c in name)
    torch.manual_seed(seed)
    config = make_config(model_type, kw)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize_constants(model, torch.Generator().manual_seed(seed + 1))
    model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    stored = {k: v.float().clone() for k, v in model.state_dict().items()}
    del model
    for f in os.listdir(out):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(out, f))  # generation_config.json: not part of the golden

    if name in FUSED_EXPERTS:
        fuse_experts(os.path.join(out, "model.safetensors"))

    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg = plain_floats(cfg)
    if model_type == "nemotron_h":
        # transformers 5 writes layers_block_type only; published configs carry the pattern.
        cfg["hybrid_override_pattern"] = kw["hybrid_override_pattern"]
        cfg["num_hidden_layers"] = len(kw["hybrid_override_pattern"])
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
        n_tensors = len(list(f.keys()))
    assert dtypes == {"BF16"}, f"{name}: stored dtypes {dtypes}"

    # 2. The reference: the bf16 weights read back into an f32 model, torch paths, eager attention.
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # The file holds exactly the random weights (nothing missing and re-initialized by the load).
    loaded = model.state_dict()
    assert set(loaded) == set(stored), f"{name}: {set(loaded) ^ set(stored)}"
    for k, v in loaded.items():
        assert torch.equal(v, stored[k]), f"{name}: {k} differs after save + load"

    # 3. Prompt: the first seed whose greedy steps all have a clear margin.
    best = None
    for tries in range(MAX_PROMPT_TRIES):
        rng = np.random.default_rng(1000 * seed + tries)
        prompt = [int(x) for x in rng.integers(0, config.vocab_size, PROMPT_LEN)]
        toks, margins = greedy(model, prompt, N_GREEDY)
        if best is None or min(margins) > min(best[2]):
            best = (prompt, toks, margins, tries)
        if min(margins) >= MIN_GREEDY_MARGIN:
            break
    prompt, toks, margins, tries = best

    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float().numpy().astype(np.float32)
        full = model(torch.tensor([prompt + toks])).logits[0].float()
    assert logits.shape == (PROMPT_LEN, config.vocab_size)
    # Teacher-forced argmax over prompt + greedy equals the greedy tokens (consistency).
    tf = [int(t) for t in torch.argmax(full[PROMPT_LEN - 1:-1], dim=-1)]
    assert tf == toks, f"{name}: teacher-forced argmax {tf} != greedy {toks}"
    prompt_margins = [row_margin(torch.from_numpy(logits[t])) for t in range(PROMPT_LEN)]
    cached = generate_with_cache(model, prompt, N_GREEDY)
    if cached != toks:
        print(f"  WARNING {name}: generate() with the cache gave {cached}, full forwards {toks}")

    np.save(os.path.join(out, "logits.npy"), logits)
    golden = {
        "versions": versions(),
        "model_class": type(model).__name__,
        "model_type": model_type,
        "prompt_ids": prompt,
        "greedy_ids": toks,
        "logits_file": "logits.npy",
        "logits_shape": list(logits.shape),
        "prefill_chunk": PREFILL_CHUNK,
        "weights_seed": seed,
        "prompt_seed": 1000 * seed + tries,
        "generate_with_cache_matches": cached == toks,
        "greedy_margins": [round(m, 6) for m in margins],
        "prompt_margins": [round(m, 6) for m in prompt_margins],
    }
    with open(os.path.join(out, "golden.json"), "w") as f:  # one key a line, lists inline
        f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in golden.items())
                + "\n}\n")
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{name}: {type(model).__name__}, {n_tensors} tensors, {size / 1024:.0f} KiB, "
          f"prompt try {tries}, min greedy margin {min(margins):.3f}, "
          f"min prompt margin {min(prompt_margins):.4f}, cache {'ok' if cached == toks else 'DIFFERS'}")


def main():
    refuse_fast_kernels()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    names = sys.argv[1:] or list(MODELS)
    for n in names:
        if n not in MODELS:
            sys.exit(f"make_goldens: unknown model {n} (known: {', '.join(MODELS)})")
    print(json.dumps(versions()))
    for n in names:
        make(n)


if __name__ == "__main__":
    main()
