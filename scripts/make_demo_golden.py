#!/usr/bin/env python3
"""Makes tests/data/demo_golden.json: transformers' greedy continuation of fixed prompts by the
bundled demo model (models/demo, docs/DEMO.md), for tests/unit/demo_model_test.cpp.

    /tmp/gvenv/bin/python scripts/make_demo_golden.py [--model models/demo] [--out FILE]

Runs on the CPU with torch, transformers and tokenizers (no fla / causal-conv1d: the reference
uses transformers' torch paths, in f32 from the bf16 weights, eager attention). Per prompt: the
prompt's ids (from the `tokenizers` package, which hybrid's tokenizer must reproduce), then
N_GREEDY greedy ids made by generate() with the cache, checked against the argmax of one full
forward over prompt + continuation, and each step's margin (top1 - top2) / std of that row. The test
compares the ids up to `checked` = the steps before the first margin below MIN_MARGIN (a near tie
that f32 rounding differences could flip; the script refuses a prompt with fewer than
MIN_CHECKED such steps and takes the next one). Also a few texts with their `tokenizers` ids, and the weights' size and
SHA-256 so the test can say when the golden is stale.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import platform
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# Tried in order; the first N_CASES without an early near tie become the golden's cases.
PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "A computer", "Q: What is",
           "Blessed are the", "The programmer", "Love is", "There was a man"]
N_CASES = 3
TEXTS = ["In the beginning God created the heaven and the earth.",
         "Q: What's the difference?\nA:  \"It's 42\" -- said the fool, 3 times.\t(tab)",
         "naïve café — “quotes” ½ 😀<|endoftext|>next"]
N_GREEDY = 48
MIN_MARGIN = 0.01
MIN_CHECKED = 24


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "demo_golden.json"))
    args = ap.parse_args()

    found = [m for m in ("fla", "causal_conv1d") if importlib.util.find_spec(m) is not None]
    if found:
        sys.exit(f"make_demo_golden: uninstall {', '.join(found)}: the golden uses transformers' torch paths")

    import torch
    import transformers
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.manual_seed(0)
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()

    def margin(row):
        r = row.double()
        top = torch.topk(r, 2).values
        return float((top[0] - top[1]) / r.std())

    cases = []
    for prompt in PROMPTS:
        if len(cases) == N_CASES:
            break
        ids = tok.encode(prompt).ids
        with torch.no_grad():
            gc = GenerationConfig(do_sample=False, max_new_tokens=N_GREEDY, min_new_tokens=N_GREEDY,
                                  eos_token_id=None, pad_token_id=0, bos_token_id=None)
            out = model.generate(torch.tensor([ids]), generation_config=gc,
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long))
            greedy = [int(t) for t in out[0, len(ids):]]
            # One full forward over prompt + continuation: row len(ids) - 1 + i predicts step i.
            rows = model(torch.tensor([ids + greedy])).logits[0, len(ids) - 1:-1].float()
        margins = [margin(r) for r in rows]
        checked = next((i for i, m in enumerate(margins) if m < MIN_MARGIN), N_GREEDY)
        full = [int(t) for t in rows.argmax(-1)]
        if full[:checked] != greedy[:checked]:
            sys.exit(f"make_demo_golden: generate() with the cache disagrees with the full forward on {prompt!r}")
        if checked < MIN_CHECKED:
            print(f"make_demo_golden: {prompt!r} has a near tie at step {checked}: skipped")
            continue
        cases.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": greedy, "checked": checked,
                      "greedy_text": tok.decode(greedy, skip_special_tokens=False),
                      "greedy_margins": [round(m, 4) for m in margins]})
        print(f"make_demo_golden: {prompt!r} -> {tok.decode(greedy)!r} (checked {checked})")

    if len(cases) < N_CASES:
        sys.exit(f"make_demo_golden: only {len(cases)} of the prompts are free of early near ties")
    weights = os.path.join(args.model, "model.safetensors")
    golden = {
        "versions": {"script": "scripts/make_demo_golden.py", "python": platform.python_version(),
                     "torch": torch.__version__, "transformers": transformers.__version__},
        "model": {"safetensors_bytes": os.path.getsize(weights),
                  "safetensors_sha256": hashlib.sha256(open(weights, "rb").read()).hexdigest()},
        "min_margin": MIN_MARGIN,
        "cases": cases,
        "tokenizer": [{"text": t, "ids": tok.encode(t).ids} for t in TEXTS + PROMPTS],
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"make_demo_golden: wrote {args.out}")


if __name__ == "__main__":
    main()
