#!/usr/bin/env python3
"""Peers timed beside hybrid in one process, on the same inputs, both captured in CUDA graphs.

    python3 scripts/compare_peers.py --lib build-cuda/libhybrid_c.so [--only gdn_decode,gdn_prefill,attn_decode,attn_prefill]
    python3 scripts/compare_peers.py --lib build-cuda/libhybrid_c.so --only ssm_prefill,ssm_decode \
        --mamba-src PATH/TO/mamba   (a checkout of github.com/state-spaces/mamba)

For each shape: run hybrid (through its C entry, scripts/hybrid_py.py) and the peer on the same
torch tensors, check that the outputs agree within bf16 tolerance, then time each as a replayed CUDA
graph (median of CUDA-event timings, L2 flushed between replays) and print the ratio peer / hybrid
(> 1: hybrid is faster). The device's copy ceiling is measured first in the same run. Peers:
flash-linear-attention (fla-core, carried as a wheel: see the device README) for GDN; torch's
scaled_dot_product_attention with each fused backend that takes the shape (flash, cuDNN's fused
attention, memory-efficient) for attention; mamba_ssm's Triton kernels for Mamba-2
(mamba_chunk_scan_combined for prefill, selective_state_update for decode), imported from its
source folder without building or importing its compiled extension: the files used are
mamba_ssm/ops/triton/{ssd_combined, ssd_bmm, ssd_chunk_state, ssd_state_passing, ssd_chunk_scan,
layernorm_gated, k_activations, softplus, selective_state_update}.py, which import torch, triton,
einops and packaging (causal_conv1d is optional there).
"""
import argparse
import importlib
import os
import statistics
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hybrid_py  # noqa: E402

FLUSH = None
FLUSH_BY_WRITE = False


def flush_l2():
    """Evicts L2 before a timed replay by reading 256 MB (L2 left clean: the timed op pays for no
    write-back of the flush's own bytes); --flush write zeroes it instead, as triton's do_bench
    does, which leaves up to 50 MB of dirty lines for the timed op to write back."""
    if FLUSH_BY_WRITE:
        FLUSH.zero_()
    else:
        FLUSH.view(torch.int32).max()


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


# Batch sizes of the decode comparisons (--decode-batches).
DECODE_BATCHES = (1, 64, 256)


def gdn_decode(hy, fla):
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    rows = []
    ceiling = copy_ceiling_gbps()
    Hk, Hv, K, V = 16, 32, 128, 128
    for B in DECODE_BATCHES:
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


def load_mamba(src):
    """mamba_chunk_scan_combined and selective_state_update from a mamba source folder (the repository
    root, or its mamba_ssm folder). The packages mamba_ssm, mamba_ssm.ops and mamba_ssm.ops.triton
    are registered as bare namespaces so that their __init__ files, which import the compiled
    selective_scan extension, do not run; the Triton modules then import as usual."""
    root = src if os.path.basename(os.path.normpath(src)) == "mamba_ssm" else os.path.join(src, "mamba_ssm")
    if not os.path.isfile(os.path.join(root, "ops", "triton", "ssd_combined.py")):
        raise ImportError(f"{root}/ops/triton/ssd_combined.py not found (--mamba-src)")
    for name, path in (("mamba_ssm", root), ("mamba_ssm.ops", os.path.join(root, "ops")),
                       ("mamba_ssm.ops.triton", os.path.join(root, "ops", "triton"))):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [path]
            sys.modules[name] = module
    combined = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
    update = importlib.import_module("mamba_ssm.ops.triton.selective_state_update")
    return combined.mamba_chunk_scan_combined, update.selective_state_update


def ssm_params(H, seed=0):
    """The Mamba-2 layer's per-head parameters in the op's domain (tests/ops/ssm_cases.cpp)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    A_log = torch.rand(H, device="cuda", generator=g) * 1.5
    D = torch.rand(H, device="cuda", generator=g) + 0.5
    dt_bias = torch.rand(H, device="cuda", generator=g) * 3.5 - 6.0
    return A_log, D, dt_bias


def ssm_tokens(T, H, P, N, G, seed=1):
    """x [T, H, P], raw dt [T, H], B and C [T, G, N], bf16 (the in_proj / conv outputs)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    bf16 = torch.bfloat16
    x = torch.rand(T, H, P, device="cuda", generator=g).mul_(2).sub_(1).to(bf16)
    dt = torch.rand(T, H, device="cuda", generator=g).mul_(2).sub_(1).to(bf16)
    B = torch.rand(T, G, N, device="cuda", generator=g).mul_(2).sub_(1).to(bf16)
    C = torch.rand(T, G, N, device="cuda", generator=g).mul_(2).sub_(1).to(bf16)
    return x, dt, B, C


def ssm_prefill(hy, mamba):
    chunk_scan, _ = mamba
    rows = []
    Q = 256  # the anchors' setting (Mamba2's chunk size)
    for (H, P, N, G, model) in ((80, 64, 128, 1, "Mamba2-2.7B"), (128, 64, 128, 8, "Nemotron-H-8B")):
        for (Bn, T) in ((1, 16384), (8, 4096)):
            A_log, D, dt_bias = ssm_params(H)
            x, dt, Bm, Cm = ssm_tokens(Bn * T, H, P, N, G)
            A = -torch.exp(A_log)
            cu = torch.arange(0, Bn * T + 1, T, device="cuda", dtype=torch.int32)
            slots = torch.arange(Bn, device="cuda", dtype=torch.int32)
            pool = torch.zeros(Bn, H, P, N, device="cuda")
            y = torch.empty(Bn * T, H, P, device="cuda", dtype=torch.bfloat16)

            # Zero initial states (has_initial_state left out), so every replay computes the same.
            def run_hybrid():
                hy.run("ssm_chunk_scan", x=x, dt=dt, A_log=A_log, B=Bm, C=Cm, D=D, dt_bias=dt_bias,
                       cu_seqlens=cu, state_slots=slots, state=pool, y=y, chunk_size=Q,
                       dt_softplus=True)

            # Equal lengths as [B, T, ...] batches (mamba_ssm's varlen path takes one batch row).
            def run_mamba():
                return chunk_scan(x.view(Bn, T, H, P), dt.view(Bn, T, H), A, Bm.view(Bn, T, G, N),
                                  Cm.view(Bn, T, G, N), chunk_size=Q, D=D, dt_bias=dt_bias,
                                  dt_softplus=True, return_final_states=True)

            shape = f"{model}: {Bn} x {T}, H {H} G {G}"
            y_ref, s_ref = run_mamba()
            try:
                run_hybrid()
            except RuntimeError as e:
                rows.append((shape, "-", "-", "-", "-", f"hybrid: {str(e).splitlines()[0]}"))
                continue
            err = max(rel_err(y, y_ref.reshape(Bn * T, H, P)), rel_err(pool, s_ref))
            t_h = time_graph(run_hybrid, reps=20)
            t_m = time_graph(run_mamba, reps=20)
            rows.append((shape, f"{t_h:.3f}", f"{t_m:.3f}", f"{t_m / t_h:.2f}", f"{err:.1e}",
                         "target >= 2" if t_m / t_h < 2 else ""))
    report(rows, f"Mamba-2 chunked prefill (ssm_chunk_scan vs mamba_chunk_scan_combined), P 64, N 128, chunk {Q}, bf16 x/dt/B/C/y, f32 states, D, dt_bias, softplus")


def ssm_decode(hy, mamba):
    _, state_update = mamba
    rows = []
    ceiling = copy_ceiling_gbps()
    H, P, N, G = 80, 64, 128, 1  # Mamba2-2.7B
    for Bn in DECODE_BATCHES:
        A_log, D, dt_bias = ssm_params(H)
        x, dt, Bm, Cm = ssm_tokens(Bn, H, P, N, G)
        g = torch.Generator(device="cuda").manual_seed(2)
        pool0 = torch.randn(Bn, H, P, N, device="cuda", generator=g) * 0.1
        slots = torch.arange(Bn, device="cuda", dtype=torch.int32)
        y = torch.empty(Bn, H, P, device="cuda", dtype=torch.bfloat16)
        pool, pool_m = pool0.clone(), pool0.clone()
        # mamba_ssm's multi-head form, as Mamba2's step calls it: per-head values broadcast over
        # P (and N for A) with stride-0 views.
        A_e = (-torch.exp(A_log))[:, None, None].expand(H, P, N)
        dt_e = dt[:, :, None].expand(Bn, H, P)
        D_e, bias_e = D[:, None].expand(H, P), dt_bias[:, None].expand(H, P)

        def run_hybrid():
            hy.run("ssm_step", x=x, dt=dt, A_log=A_log, B=Bm, C=Cm, D=D, dt_bias=dt_bias, state=pool,
                   state_slots=slots, y=y, dt_softplus=True)

        def run_mamba():
            return state_update(pool_m, x, dt_e, A_e, Bm, Cm, D=D_e, z=None, dt_bias=bias_e,
                                dt_softplus=True)

        try:
            y_ref = run_mamba()  # one step each from the same states: outputs and states compared
            run_hybrid()
        except (RuntimeError, AssertionError, TypeError) as e:
            rows.append((f"B={Bn}", "-", "-", "-", "-", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
            continue
        err = max(rel_err(y, y_ref), rel_err(pool, pool_m))
        t_h = time_graph(run_hybrid)  # replays keep stepping the states: same bytes every time
        t_m = time_graph(run_mamba)
        state_bytes = 2 * Bn * H * P * N * 4
        gbps_h, gbps_m = state_bytes / (t_h * 1e-3) / 1e9, state_bytes / (t_m * 1e-3) / 1e9
        note = f"hybrid {100 * gbps_h / ceiling:.0f}% / mamba_ssm {100 * gbps_m / ceiling:.0f}% of copy"
        rows.append((f"B={Bn}, f32 state", f"{t_h:.4f}", f"{t_m:.4f}", f"{t_m / t_h:.2f}", f"{err:.1e}", note))
    report(rows, f"Mamba-2 decode (ssm_step vs selective_state_update), H {H} P {P} N {N} G {G}, bf16 x, f32 state, copy ceiling {ceiling:.0f} GB/s")


def sdpa_backends():
    """torch SDPA's fused backends that may serve D = 256, by name (cuDNN's fused attention among
    them: this is how the cuDNN alternative of issue 6 is measured)."""
    from torch.nn.attention import SDPBackend
    return {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def paged_kv(B, L, Hkv, D, page, seed=1):
    """K/V of B sequences of L tokens, contiguous [B, L, Hkv, D] bf16, and the same memory seen as
    hybrid's paged cache [B·L/page, page, Hkv, D] with the identity page table."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    k = torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=g)
    pages = L // page
    table = torch.arange(B * pages, device="cuda", dtype=torch.int32).view(B, pages)
    return k, v, k.view(B * pages, page, Hkv, D), v.view(B * pages, page, Hkv, D), table


def time_sdpa(fn, backend):
    from torch.nn.attention import sdpa_kernel
    try:
        with sdpa_kernel([backend]):
            out = fn()
            t = time_graph(fn, reps=20)
        return out, t
    except RuntimeError as e:
        return None, str(e).splitlines()[0][:60]


def attn_decode(hy, _):
    F = torch.nn.functional
    rows = []
    Hq, Hkv, D, page = 16, 2, 256, 64
    for (B, L) in ((1, 32768), (1, 131072), (32, 8192), (128, 4096)):
        k, v, kc, vc, table = paged_kv(B, L, Hkv, D, page)
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
        lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
        out = torch.empty_like(q)

        def run_hybrid():
            hy.run("attn_decode", q=q, k_cache=kc, v_cache=vc, page_table=table, seq_lens=lens, out=out)

        def run_sdpa():
            return F.scaled_dot_product_attention(q.view(B, Hq, 1, D), k.transpose(1, 2),
                                                  v.transpose(1, 2), enable_gqa=True)

        run_hybrid()
        t_h = time_graph(run_hybrid, reps=20)
        kv_bytes = 2 * B * L * Hkv * D * 2
        for name, backend in sdpa_backends().items():
            ref, t_s = time_sdpa(run_sdpa, backend)
            if ref is None:
                rows.append((f"B {B} ctx {L}", f"{t_h:.4f}", "-", "-", "-", f"SDPA {name}: {t_s}"))
                continue
            err = rel_err(out, ref.view(B, Hq, D))
            rows.append((f"B {B} ctx {L}", f"{t_h:.4f}", f"{t_s:.4f}", f"{t_s / t_h:.2f}", f"{err:.1e}",
                         f"SDPA {name}; KV read hybrid {kv_bytes / (t_h * 1e-3) / 1e12:.2f} TB/s, "
                         f"peer {kv_bytes / (t_s * 1e-3) / 1e12:.2f} TB/s"))
    report(rows, f"attn_decode, Hq {Hq} / Hkv {Hkv}, D {D}, bf16 paged cache (page {page}) vs torch SDPA")


def attn_prefill(hy, _):
    F = torch.nn.functional
    rows = []
    page = 64
    # Qwen3-Next's full-attention heads (16 / 2, D 256) at two lengths; Nemotron-H 8B's (32 / 8, D 128).
    for Hq, Hkv, D, T in ((16, 2, 256, 4096), (16, 2, 256, 16384), (32, 8, 128, 4096)):
        k, v, kc, vc, table = paged_kv(1, T, Hkv, D, page)
        q = torch.randn(T, Hq, D, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, T], device="cuda", dtype=torch.int32)
        lens = torch.tensor([T], device="cuda", dtype=torch.int32)
        out = torch.empty_like(q)

        def run_hybrid():
            hy.run("attn_prefill", q=q, k_cache=kc, v_cache=vc, page_table=table, cu_seqlens=cu,
                   seq_lens=lens, out=out)

        def run_sdpa():
            return F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(1, 2),
                                                  v.transpose(1, 2), is_causal=True, enable_gqa=True)

        run_hybrid()
        t_h = time_graph(run_hybrid, reps=10)
        flops = 4 * T * T * Hq * D / 2  # causal: half of QK^T and PV
        for name, backend in sdpa_backends().items():
            ref, t_s = time_sdpa(run_sdpa, backend)
            if ref is None:
                rows.append((f"causal T {T} D {D}", f"{t_h:.3f}", "-", "-", "-", f"SDPA {name}: {t_s}"))
                continue
            err = rel_err(out, ref[0].transpose(0, 1))
            rows.append((f"causal T {T} D {D}", f"{t_h:.3f}", f"{t_s:.3f}", f"{t_s / t_h:.2f}", f"{err:.1e}",
                         f"SDPA {name}; hybrid {flops / (t_h * 1e-3) / 1e12:.0f} TFLOP/s, "
                         f"peer {flops / (t_s * 1e-3) / 1e12:.0f} TFLOP/s"))
    report(rows, "attn_prefill, Hq / Hkv 16 / 2 at D 256, 32 / 8 at D 128, bf16, one sequence vs torch SDPA")


def sampling(hy, _):
    """The sampling ops on a decode step's logits (Qwen3-Next's vocab, f32) against what torch-based
    engines run for them: torch.argmax (greedy), torch.topk (vLLM's top-k path), the row's
    softmax mass in f64, and vLLM's whole-row draw (softmax, then argmax of p / Exp(1) noise)."""
    V = 151936
    rows = []
    for N in (1, 64):
        g = torch.Generator(device="cuda").manual_seed(N)
        x = torch.rand(N, V, device="cuda", generator=g) * 16 - 8
        out = torch.empty(N, device="cuda", dtype=torch.int32)

        def run_hybrid():
            hy.run("argmax", x=x, out=out)

        t_h = time_graph(run_hybrid)
        t_p = time_graph(lambda: torch.argmax(x, dim=-1))
        same = (out.long() == torch.argmax(x, dim=-1)).float().mean().item()
        rows.append((f"argmax N {N}", f"{t_h:.4f}", f"{t_p:.4f}", f"{t_p / t_h:.2f}",
                     f"ids equal {same:.2f}", "torch.argmax"))
        for k in (40, 1024):
            ids = torch.empty(N, k, device="cuda", dtype=torch.int32)
            vals = torch.empty(N, k, device="cuda", dtype=torch.float32)

            def run_hybrid_topk():
                hy.run("top_k", x=x, ids=ids, values=vals)

            t_h = time_graph(run_hybrid_topk)
            t_p = time_graph(lambda: torch.topk(x, k, dim=-1))
            ref = torch.topk(x, k, dim=-1)
            same = (vals == ref.values).float().mean().item()
            rows.append((f"top_k N {N} k {k}", f"{t_h:.4f}", f"{t_p:.4f}", f"{t_p / t_h:.2f}",
                         f"values equal {same:.2f}", "torch.topk"))
        mass = torch.empty(N, device="cuda", dtype=torch.float64)

        def run_hybrid_mass():
            hy.run("softmax_mass", x=x, out=mass, temperature=0.8)

        def run_torch_mass():
            return torch.exp((x - x.amax(-1, keepdim=True)) / 0.8).sum(-1, dtype=torch.float64)

        t_h = time_graph(run_hybrid_mass)
        t_p = time_graph(run_torch_mass)
        rows.append((f"softmax_mass N {N}", f"{t_h:.4f}", f"{t_p:.4f}", f"{t_p / t_h:.2f}",
                     f"{rel_err(mass, run_torch_mass()):.1e}", "torch exp-sum (f32 exp, f64 sum)"))
        draws = torch.randint(0, 1 << 53, (N,), device="cuda", dtype=torch.int64, generator=g)

        def run_hybrid_draw():
            hy.run("sample_rows", x=x, draws=draws, out=out, temperature=0.8)

        def run_vllm_draw():
            probs = torch.softmax(x / 0.8, dim=-1)
            q = torch.empty_like(probs).exponential_()
            return probs.div_(q).argmax(dim=-1)

        t_h = time_graph(run_hybrid_draw)
        t_p = time_graph(run_vllm_draw)
        rows.append((f"sample_rows N {N}", f"{t_h:.4f}", f"{t_p:.4f}", f"{t_p / t_h:.2f}", "-",
                     "vLLM's draw: softmax, p / Exp(1), argmax"))
    report(rows, "sampling ops on [N, 151936] f32 logits vs torch")


def main():
    global FLUSH, FLUSH_BY_WRITE, DECODE_BATCHES
    p = argparse.ArgumentParser()
    p.add_argument("--lib", default="build-cuda/libhybrid_c.so")
    p.add_argument("--only", default="gdn_decode,gdn_prefill",
                   help="comma-separated: gdn_decode, gdn_prefill, attn_decode, attn_prefill, "
                        "ssm_prefill, ssm_decode, sampling")
    p.add_argument("--mamba-src", default=None,
                   help="source folder of state-spaces/mamba (for ssm_prefill / ssm_decode)")
    p.add_argument("--flush", choices=["read", "write"], default="read",
                   help="how L2 is flushed before each timed replay (see flush_l2)")
    p.add_argument("--decode-batches", default="1,64,256",
                   help="comma-separated batch sizes of gdn_decode / ssm_decode (one, for a "
                        "profiler's first matching launch)")
    args = p.parse_args()
    DECODE_BATCHES = tuple(int(b) for b in args.decode_batches.split(","))
    torch.manual_seed(0)
    FLUSH = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    FLUSH_BY_WRITE = args.flush == "write"
    hy = hybrid_py.Hybrid(args.lib, "cuda:0")
    try:
        import fla  # noqa: F401
        fla_ok = True
    except ImportError as e:
        print(f"flash-linear-attention not importable ({e}): GDN comparisons skipped")
        fla_ok = False
    mamba = None
    if any(name.startswith("ssm") for name in args.only.split(",")):
        try:
            if not args.mamba_src:
                raise ImportError("--mamba-src not given")
            mamba = load_mamba(args.mamba_src)
        except ImportError as e:
            print(f"mamba_ssm's Triton kernels not importable ({e}): Mamba-2 comparisons skipped")
    print(f"# compare_peers on {torch.cuda.get_device_name()}, torch {torch.__version__}, L2 flush by {args.flush}")
    runs = {"gdn_decode": gdn_decode, "gdn_prefill": gdn_prefill, "attn_decode": attn_decode,
            "attn_prefill": attn_prefill, "ssm_prefill": ssm_prefill, "ssm_decode": ssm_decode,
            "sampling": sampling}
    for name in args.only.split(","):
        if name not in runs:
            raise SystemExit(f"--only: unknown comparison '{name}' (known: {', '.join(runs)})")
        if name.startswith("gdn") and not fla_ok:
            continue
        if name.startswith("ssm") and mamba is None:
            continue
        runs[name](hy, mamba)


if __name__ == "__main__":
    main()
