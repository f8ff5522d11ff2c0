#!/usr/bin/env python3
"""The GDN prefill pipeline's kernel timeline on the GPU: when each piece's stage 1 and spine ran.

    python3 scripts/trace_gdn_pipeline.py --lib build-cuda/libhybrid_c.so [--T 8192,32768] [--reps 3]

Runs gdn_chunk_prefill (one sequence, Hk 16, Hv 32, K = V = 128, bf16, L2 norm: the benchmark
shape) through hybrid's C entry, captured in a CUDA graph as the benchmarks run it, and replays it
under torch.profiler, whose CUPTI trace has each kernel's start and end on the GPU, concurrent
kernels included (no Nsight Systems on the GPU machine). Prints per replay, for every kernel in
time order: its start and end in µs from the replay's first kernel, its stream and its name; then
per pipeline piece: stage 1's span, the spine's span, how long the spine's piece waited after the
spine's previous piece ended (the boundary) and after its stage 1 ended. The environment switches
of gdn_chunk_prefill (HYBRID_GDN_CHUNK_PIPE_RATIO, _PIPE_SIZES, _WU_PDL, ...) are read once per
process: one setting a run.
"""
import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hybrid_py  # noqa: E402


def short(name):
    """The kernel's name without namespaces and template arguments."""
    base = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    base = base.split("(")[0].split("<")[0]
    return base.split("::")[-1] or name[:40]


def timeline(trace_path):
    """The kernels of a chrome trace as (start µs, end µs, stream, name), in start order."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    out = []
    for e in events:
        if e.get("cat") == "kernel":
            start = float(e["ts"])
            out.append((start, start + float(e["dur"]), e.get("args", {}).get("stream"), e["name"]))
    return sorted(out)


def replays(kernels, gap_us):
    """The kernels split into replays at idle gaps longer than gap_us."""
    groups, end = [], None
    for k in kernels:
        if end is None or k[0] - end > gap_us:
            groups.append([])
        groups[-1].append(k)
        end = k[1] if end is None else max(end, k[1])
    return groups


def report(group):
    t0 = group[0][0]
    for start, end, stream, name in group:
        print(f"  {start - t0:9.1f} {end - t0:9.1f}  {end - start:8.1f}  s{stream}  {short(name)}")
    total = max(k[1] for k in group) - t0
    stage1 = [k for k in group if "wu_tc" in k[3]]
    spine = [k for k in group if "spine" in k[3]]
    print(f"  total {total:.1f} µs; {len(stage1)} stage-1 and {len(spine)} spine launches")
    if len(stage1) == len(spine) and len(spine) > 1:
        print("  piece  stage 1 (start-end)    spine (start-end)    spine waited: after its stage 1, after the previous spine")
        for i, (w, s) in enumerate(zip(stage1, spine)):
            prev = s[0] - spine[i - 1][1] if i else float("nan")
            print(f"  {i:5d}  {w[0] - t0:8.1f}-{w[1] - t0:8.1f}  {s[0] - t0:8.1f}-{s[1] - t0:8.1f}"
                  f"    {s[0] - w[1]:8.1f}  {prev:8.1f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", default="build-cuda/libhybrid_c.so")
    p.add_argument("--T", default="8192,32768", help="comma-separated sequence lengths")
    p.add_argument("--Hv", type=int, default=32)
    p.add_argument("--reps", type=int, default=3, help="graph replays traced per length")
    args = p.parse_args()
    hy = hybrid_py.Hybrid(args.lib, "cuda:0")
    flush = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    Hk, K, V, Hv = 16, 128, 128, args.Hv
    for T in (int(t) for t in args.T.split(",")):
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(T, Hk, K, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(T, Hk, K, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(T, Hv, V, device="cuda", dtype=torch.bfloat16, generator=g)
        a = torch.randn(T, Hv, device="cuda", generator=g)
        gate = (-torch.exp(torch.rand(Hv, device="cuda", generator=g) - 2.0) *
                torch.nn.functional.softplus(a)).float().contiguous()
        beta = torch.sigmoid(torch.randn(T, Hv, device="cuda", generator=g)).contiguous()
        cu = torch.tensor([0, T], device="cuda", dtype=torch.int32)
        slots = torch.zeros(1, device="cuda", dtype=torch.int32)
        init = torch.zeros(1, device="cuda", dtype=torch.int32)
        pool = torch.zeros(1, Hv, V, K, device="cuda")
        out = torch.empty(T, Hv, V, device="cuda", dtype=torch.bfloat16)

        def run():
            hy.run("gdn_chunk_prefill", q=q, k=k, v=v, g=gate, beta=beta, cu_seqlens=cu,
                   state_slots=slots, has_initial_state=init, state=pool, out=out,
                   use_qk_l2norm=True)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        graph.replay()
        torch.cuda.synchronize()
        def traced(call):
            """The kernels of args.reps calls of `call`, each after an L2 flush."""
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(args.reps):
                    flush.view(torch.int32).max()
                    torch.cuda.synchronize()
                    call()
                    torch.cuda.synchronize()
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                path = f.name
            prof.export_chrome_trace(path)
            kernels = [k for k in timeline(path) if "reduce" not in k[3].lower()]  # not the flush
            os.unlink(path)
            return kernels

        how = "graph replay"
        kernels = traced(graph.replay)
        if not kernels:  # a profiler that does not see the graph's kernels: the eager calls
            how = "eager calls (the profiler saw no kernel of the graph's replays)"
            kernels = traced(run)
        plan = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                        if k.startswith("HYBRID_GDN_CHUNK_")) or "the defaults"
        for i, group in enumerate(replays(kernels, gap_us=40.0)):
            print(f"# 1 x {T}, Hv {Hv}, {how} {i} ({plan})")
            report(group)


if __name__ == "__main__":
    main()
