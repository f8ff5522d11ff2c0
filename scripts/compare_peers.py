#!/usr/bin/env python3
"""Peers timed beside hybrid in one process, on the same inputs, both captured in CUDA graphs.

    python3 scripts/compare_peers.py --lib build-cuda/libhybrid_c.so [--only gdn_decode,gdn_prefill]

For each shape: run hybrid (through its C entry, scripts/hybrid_py.py) and the peer on the same
torch tensors, check that the outputs agree within bf16 tolerance, then time each as a replayed CUDA
graph (median of CUDA-event timings, L2 flushed between replays) and print the ratio peer / hybrid
(> 1: hybrid is faster). The device's copy ceiling is measured first in the same run. Peers:
flash-linear-attention (fla-core, carried as a wheel: see the device README) for GDN.
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hybrid_py  # noqa: E402

FLUSH = None


def flush_l2():
    FLUSH.zero_()


def time_graph(fn, reps=50):
    """Median ms of fn captured in a CUDA graph, L2 flushed before each replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()  # warm-up: compilation, workspace growth
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(reps):
        flush_l2()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def copy_ceiling_gbps():
    n = 1 << 28  # 1 GiB of f32 (torch's byte copy kernel is slower than its f32 one)
    src = torch.rand(n, device="cuda")
    dst = torch.empty_like(src)
    # copy_ of a same-dtype tensor is cudaMemcpyAsync, which measured 2.7 TB/s on the H200 where
    # an elementwise kernel moves 4.1+; take the faster of the two.
    ms = min(time_graph(lambda: dst.copy_(src), reps=10),
             time_graph(lambda: torch.mul(src, 1.0, out=dst), reps=10))
    return 2 * 4 * n / (ms * 1e-3) / 1e9


def rel_err(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def report(rows, title):
    print(f"\n## {title}")
    print("| shape | hybrid ms | peer ms | peer / hybrid | rel. err | note |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


def gdn_inputs(B, T, Hk, Hv, K, V, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B * T, Hk, K, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B * T, Hk, K, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B * T, Hv, V, device="cuda", dtype=torch.bfloat16, generator=g)
    # Qwen3-Next's gate: g = -exp(A_log)·softplus(a + dt_bias), decays mostly in [0.9, 1).
    a = torch.randn(B * T, Hv, device="cuda", generator=g)
    gate = -torch.exp(torch.rand(Hv, device="cuda", generator=g) - 2.0) * torch.nn.functional.softplus(a)
    beta = torch.sigmoid(torch.randn(B * T, Hv, device="cuda", generator=g))
    return q, k, v, gate.float().contiguous(), beta.float().contiguous()


def gdn_decode(hy, fla):
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    rows = []
    ceiling = copy_ceiling_gbps()
    Hk, Hv, K, V = 16, 32, 128, 128
    for B in (1, 64, 256):
        q, k, v, g, beta = gdn_inputs(B, 1, Hk, Hv, K, V)
        pool0 = torch.randn(B, Hv, V, K, device="cuda") * 0.1
        cu = torch.arange(B + 1, device="cuda", dtype=torch.int32)
        slots = torch.arange(B, device="cuda", dtype=torch.int32)
        out = torch.empty(B, Hv, V, device="cuda", dtype=torch.bfloat16)
        pool = pool0.clone()

        def run_hybrid():
            hy.run("gdn_recurrent", q=q, k=k, v=v, g=g, beta=beta, state=pool, cu_seqlens=cu,
                   state_slots=slots, out=out, use_qk_l2norm=True)

        def run_fla():
            return fused_recurrent_gated_delta_rule(
                q.view(B, 1, Hk, K), k.view(B, 1, Hk, K), v.view(B, 1, Hv, V), g=g.view(B, 1, Hv),
                beta=beta.view(B, 1, Hv), initial_state=pool0, output_final_state=True,
                use_qk_l2norm_in_kernel=True, state_v_first=True)

        run_hybrid()
        o_ref, s_ref = run_fla()
        err = max(rel_err(out, o_ref.view(B, Hv, V)), rel_err(pool, s_ref))
        t_h = time_graph(run_hybrid)
        t_f = time_graph(run_fla)
        state_bytes = 2 * B * Hv * V * K * 4
        note = f"hybrid {state_bytes / (t_h * 1e-3) / 1e9:.0f} GB/s = {100 * state_bytes / (t_h * 1e-3) / 1e9 / ceiling:.0f}% of copy"
        rows.append((f"B={B}, f32 state", f"{t_h:.4f}", f"{t_f:.4f}", f"{t_f / t_h:.2f}", f"{err:.1e}", note))
    report(rows, f"GDN decode, Hk {Hk} / Hv {Hv}, K = V = {K}, bf16 q/k/v (FLA fused_recurrent), copy ceiling {ceiling:.0f} GB/s")


def gdn_prefill(hy, fla):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    rows = []
    for (B, T, Hv) in ((1, 8192, 32), (1, 32768, 32), (8, 4096, 32), (1, 131072, 32), (1, 8192, 64)):
        Hk, K, V = 16, 128, 128
        q, k, v, g, beta = gdn_inputs(B, T, Hk, Hv, K, V)
        cu = torch.arange(0, B * T + 1, T, device="cuda", dtype=torch.int32)
        slots = torch.arange(B, device="cuda", dtype=torch.int32)
        pool = torch.zeros(B, Hv, V, K, device="cuda")
        init = torch.zeros(B, device="cuda", dtype=torch.int32)
        out = torch.empty(B * T, Hv, V, device="cuda", dtype=torch.bfloat16)

        def run_hybrid():
            hy.run("gdn_chunk_prefill", q=q, k=k, v=v, g=g, beta=beta, cu_seqlens=cu, state_slots=slots,
                   has_initial_state=init, state=pool, out=out, use_qk_l2norm=True)

        # Equal lengths: FLA takes the batch as [B, T, ...] without cu_seqlens (with cu_seqlens it
        # reads them on the host, which a CUDA-graph capture cannot contain).
        def run_fla():
            return chunk_gated_delta_rule(
                q.view(B, T, Hk, K), k.view(B, T, Hk, K), v.view(B, T, Hv, V), g.view(B, T, Hv),
                beta.view(B, T, Hv), output_final_state=True, use_qk_l2norm_in_kernel=True,
                state_v_first=True)

        o_ref, s_ref = run_fla()
        o_ref = o_ref.reshape(B * T, Hv, V)
        try:
            run_hybrid()
        except RuntimeError as e:
            rows.append((f"{B} x {T}, Hv {Hv}", "-", "-", "-", "-", f"hybrid: {str(e).splitlines()[0]}"))
            continue
        err = max(rel_err(out, o_ref), rel_err(pool, s_ref))
        t_h = time_graph(run_hybrid, reps=20)
        t_f = time_graph(run_fla, reps=20)
        rows.append((f"{B} x {T}, Hv {Hv}", f"{t_h:.3f}", f"{t_f:.3f}", f"{t_f / t_h:.2f}", f"{err:.1e}", ""))
    report(rows, "GDN chunked prefill, Hk 16, K = V = 128, bf16 q/k/v, f32 state, L2 norm in kernel (FLA chunk_gated_delta_rule)")


def main():
    global FLUSH
    p = argparse.ArgumentParser()
    p.add_argument("--lib", default="build-cuda/libhybrid_c.so")
    p.add_argument("--only", default="gdn_decode,gdn_prefill")
    args = p.parse_args()
    torch.manual_seed(0)
    FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    hy = hybrid_py.Hybrid(args.lib, "cuda:0")
    try:
        import fla  # noqa: F401
        fla_ok = True
    except ImportError as e:
        print(f"flash-linear-attention not importable ({e}): GDN comparisons skipped")
        fla_ok = False
    print(f"# compare_peers on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name in args.only.split(","):
        if name.startswith("gdn") and not fla_ok:
            continue
        {"gdn_decode": gdn_decode, "gdn_prefill": gdn_prefill}[name](hy, None)


if __name__ == "__main__":
    main()
