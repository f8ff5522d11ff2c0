#!/usr/bin/env python3
"""Peers timed beside hybrid in one process, on the same inputs, both captured in CUDA graphs.

    python3 scripts/compare_peers.py --lib build-cuda/libhybrid_c.so [--only gdn_decode,gdn_prefill,attention]

For each shape: run hybrid (through its C entry, scripts/hybrid_py.py) and the peer on the same
torch tensors, check that the outputs agree within bf16 tolerance, then time each as a replayed CUDA
graph (median of CUDA-event timings, L2 flushed between replays) and print the ratio peer / hybrid
(> 1: hybrid is faster). The device's copy ceiling is measured first in the same run. Peers:
flash-linear-attention (fla-core, carried as a wheel: see the device README) for GDN; torch's
scaled_dot_product_attention for attention, timed under its default choice and under each fused
backend (flash, cuDNN, memory-efficient) — the cuDNN row is the measurement issue 6 asks for
before choosing between an own prefill kernel and cuDNN's fused attention.
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
    ms = time_graph(lambda: dst.copy_(src), reps=10)
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


def sdpa_backends():
    """(name, backend or None) pairs to time torch SDPA with: its own choice, then each fused one."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return [("default", None)]
    return [("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def time_sdpa(fn):
    """{backend name: ms or the reason it failed} for fn() under each SDPA backend."""
    from contextlib import nullcontext
    out = {}
    for name, backend in sdpa_backends():
        try:
            from torch.nn.attention import sdpa_kernel
            ctx = nullcontext() if backend is None else sdpa_kernel(backend)
        except ImportError:
            ctx = nullcontext()
        try:
            with ctx:
                out[name] = (time_graph(fn, reps=20), fn())
        except RuntimeError as e:
            out[name] = (None, str(e).splitlines()[0][:60])
    return out


def attention(hy, _):
    """attn_decode and attn_prefill (Qwen3-Next heads: 16 q / 2 KV, D 256, bf16) beside torch SDPA
    (enable_gqa) on the same K/V: hybrid reads them as a paged cache whose page table is the
    identity (page 16 for decode, 64 for prefill), SDPA as [B, Hkv, ctx, D] views of the same
    memory. Decode counts K/V bytes; prefill counts 4·D·Hq per causal (query, key) pair."""
    Hq, Hkv, D = 16, 2, 256
    ceiling = copy_ceiling_gbps()
    rows = []
    for (B, ctx_len, page) in ((1, 32768, 16), (32, 8192, 16), (128, 4096, 64), (1, 131072, 64)):
        g = torch.Generator(device="cuda").manual_seed(1)
        kv = torch.randn(2, B * ctx_len, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
        k_cache = kv[0].view(B * ctx_len // page, page, Hkv, D)
        v_cache = kv[1].view(B * ctx_len // page, page, Hkv, D)
        pages = ctx_len // page
        table = torch.arange(B * pages, device="cuda", dtype=torch.int32).view(B, pages)
        lens = torch.full((B,), ctx_len, device="cuda", dtype=torch.int32)
        out = torch.empty(B, Hq, D, device="cuda", dtype=torch.bfloat16)

        def run_hybrid():
            hy.run("attn_decode", q=q, k_cache=k_cache, v_cache=v_cache, page_table=table,
                   seq_lens=lens, out=out)

        ks = kv[0].view(B, ctx_len, Hkv, D).transpose(1, 2)
        vs = kv[1].view(B, ctx_len, Hkv, D).transpose(1, 2)

        def run_sdpa():
            return torch.nn.functional.scaled_dot_product_attention(
                q.view(B, Hq, 1, D), ks, vs, enable_gqa=True).view(B, Hq, D)

        run_hybrid()
        t_h = time_graph(run_hybrid)
        nbytes = 2 * B * ctx_len * Hkv * D * 2
        for name, (t_s, o_ref) in time_sdpa(run_sdpa).items():
            if t_s is None:
                rows.append((f"decode B {B} ctx {ctx_len}", f"{t_h:.4f}", "-", "-", "-", f"SDPA {name}: {o_ref}"))
                continue
            note = (f"hybrid {nbytes / (t_h * 1e-3) / 1e12:.2f} TB/s, SDPA {name} "
                    f"{nbytes / (t_s * 1e-3) / 1e12:.2f} TB/s")
            rows.append((f"decode B {B} ctx {ctx_len}", f"{t_h:.4f}", f"{t_s:.4f}", f"{t_s / t_h:.2f}",
                         f"{rel_err(out, o_ref):.1e}", note))
    for T in (4096, 16384):
        page = 64
        g = torch.Generator(device="cuda").manual_seed(2)
        kv = torch.randn(2, T, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
        q = torch.randn(T, Hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
        table = torch.arange(T // page, device="cuda", dtype=torch.int32).view(1, T // page)
        cu = torch.tensor([0, T], device="cuda", dtype=torch.int32)
        lens = torch.tensor([T], device="cuda", dtype=torch.int32)
        out = torch.empty(T, Hq, D, device="cuda", dtype=torch.bfloat16)

        def run_hybrid():
            hy.run("attn_prefill", q=q, k_cache=kv[0].view(T // page, page, Hkv, D),
                   v_cache=kv[1].view(T // page, page, Hkv, D), page_table=table, cu_seqlens=cu,
                   seq_lens=lens, out=out)

        def run_sdpa():
            return torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1).unsqueeze(0), kv[0].transpose(0, 1).unsqueeze(0),
                kv[1].transpose(0, 1).unsqueeze(0), is_causal=True, enable_gqa=True,
            ).squeeze(0).transpose(0, 1)

        run_hybrid()
        t_h = time_graph(run_hybrid, reps=20)
        flops = 4.0 * D * Hq * T * (T + 1) / 2
        for name, (t_s, o_ref) in time_sdpa(run_sdpa).items():
            if t_s is None:
                rows.append((f"prefill T {T}", f"{t_h:.3f}", "-", "-", "-", f"SDPA {name}: {o_ref}"))
                continue
            note = (f"hybrid {flops / (t_h * 1e-3) / 1e12:.0f} TFLOP/s, SDPA {name} "
                    f"{flops / (t_s * 1e-3) / 1e12:.0f} TFLOP/s")
            rows.append((f"prefill T {T} causal", f"{t_h:.3f}", f"{t_s:.3f}", f"{t_s / t_h:.2f}",
                         f"{rel_err(out, o_ref):.1e}", note))
    report(rows, f"attention, 16 q / 2 KV heads, D 256, bf16 (peer: torch SDPA, enable_gqa, per backend), copy ceiling {ceiling:.0f} GB/s")


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
        {"gdn_decode": gdn_decode, "gdn_prefill": gdn_prefill, "attention": attention}[name](hy, None)


if __name__ == "__main__":
    main()
