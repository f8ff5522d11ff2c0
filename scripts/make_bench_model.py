#!/usr/bin/env python3
"""Makes a random checkpoint with a published model's full-width layers but only a few of them,
for timing the engine (`hybrid bench`) on a GPU machine that has no real checkpoint and no
network. The weights are transformers' random init in bf16 (the router's near-uniform choices
are a fair load for the experts); the tokens such a model produces mean nothing.

  python3 scripts/make_bench_model.py OUT_DIR [--config tests/data/models/qwen3_next_80b/config.json]
                                      [--layers 4]
  build/tools/hybrid/hybrid bench -m OUT_DIR --device cuda -p 512 -n 32 -r 3

The config is the published one (tests/data/models/*/config.json hold config-only copies) with
num_hidden_layers replaced: Qwen3-Next-80B-A3B at 4 layers is 3 GDN layers and 1 gated attention
layer, each with 512 routed experts (~13 GB in bf16; 215 s with the init on the CPU).
Needs torch, transformers and safetensors (the GPU machine has them).
"""
import argparse
import json
import os
import sys

import torch
import transformers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--config",
                    default=os.path.join(ROOT, "tests", "data", "models", "qwen3_next_80b",
                                         "config.json"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="where the random init runs (default cuda when there is one: the CPU "
                         "took 215 s for Qwen3-Next's 7.2 B parameters on the GPU machine's 16 "
                         "cores)")
    args = ap.parse_args()
    with open(args.config) as f:
        cfg = json.load(f)
    if args.layers < 1:
        sys.exit("make_bench_model: --layers must be at least 1")
    cfg["num_hidden_layers"] = args.layers
    for key in ("layer_types", "layers_block_type"):  # derived from the layer count again
        cfg.pop(key, None)
    model_type = cfg.pop("model_type")
    for key in ("architectures", "torch_dtype", "transformers_version"):
        cfg.pop(key, None)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(0)
    try:
        with torch.device(args.device):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    except (RuntimeError, TypeError) as e:  # no room on the device, or an older transformers
        if args.device == "cpu":
            raise
        print(f"make_bench_model: init on {args.device} failed ({e}); on the CPU instead",
              file=sys.stderr)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"make_bench_model: {model_type}, {args.layers} layers, {n / 1e9:.2f} B parameters "
          f"in {args.out}")


if __name__ == "__main__":
    main()
