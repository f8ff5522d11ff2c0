#!/usr/bin/env python3
"""Prints the loss-curve section of docs/DEMO.md (markdown) from a train_log.json written by
scripts/train_demo.py.

    python3 scripts/demo_loss_summary.py models/demo/train_log.json
"""
import json
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    log = json.load(open(sys.argv[1]))
    env = log["environment"]
    print(f"Run: {log['train_seconds']:.0f} s on {env['device']} (torch {env['torch']}, transformers "
          f"{env['transformers']}, fla {env['fla'] or 'not installed'}, MoE {log.get('experts_implementation', '?')}), "
          f"{log['steps']} steps of {log['args']['batch']} x {log['args']['seq']} tokens = "
          f"{log['tokens_seen'] / 1e6:.1f} M tokens ({log['epochs']} passes over the "
          f"{log['train_tokens'] / 1e6:.2f} M training tokens); weights kept from step {log['kept_step']}. "
          f"Validation loss of the kept weights on all {log['val_tokens']} held-out tokens: "
          f"**{log['val_loss']:.4f}** (perplexity {log['val_perplexity']}).")
    print()
    vals = {v["step"]: v["val_loss"] for v in log["val_curve"]}
    curve = log["loss_curve"]
    # About 12 rows: every k-th logged point, plus every validation step and the last.
    k = max(1, len(curve) // 12)
    rows = [e for i, e in enumerate(curve) if i % k == 0 or e["step"] in vals or i == len(curve) - 1]
    print("| step | time (s) | tokens (M) | lr | train loss | val loss (first "
          f"{log['args']['eval_windows']} windows) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for e in rows:
        v = vals.get(e["step"])
        print(f"| {e['step']} | {e['seconds']:.0f} | {e['tokens'] / 1e6:.1f} | {e['lr']:.2e} | "
              f"{e['loss']:.3f} | {'' if v is None else f'{v:.3f}'} |")
    missing = [s for s in vals if s not in {e['step'] for e in rows}]
    for s in missing:
        print(f"| {s} | | | | | {vals[s]:.3f} |")


if __name__ == "__main__":
    main()
