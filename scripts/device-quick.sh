#!/usr/bin/env bash
# A whole GPU check from carried binaries in one call, most important first so that a time limit
# cuts the least: the engine's CUDA tests and the demo model, every CUDA op case, the fallback
# variants, the benchmark shapes (graph-timed), the stage timers, the peers, then memcheck.
#   here:            scripts/device-carry.sh
#   GPU machine:     scripts/device-quick.sh    (device tool: carry [".carry", ".whl", ".mamba-src"])
# Everything it prints also goes to $OUT/final.log; the other logs are in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-quick-logs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/final.log") 2>&1
tar xJf .carry/bin.tar.xz -C .carry || exit 1
OPS=.carry/hybrid-ops
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p build
(cd build && HYBRID_CLI=$PWD/../.carry/hybrid timeout 60 ../.carry/hybrid_unit_tests --gtest_filter='CudaGraph.*:Parity.*:*Cuda*:DemoModel*:Cli.*') > "$OUT"/unit.txt 2>&1
grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran" $OUT/unit.txt
echo "== demo on the default device"
timeout 30 .carry/hybrid run -p "In the beginning" -n 48 --temp 0.8 --top-p 0.95 --seed 2 2>&1 | tee $OUT/demo.txt | tail -12
timeout 30 .carry/hybrid run --ids 950,260,2381 -n 32 --print-ids > "$OUT"/demo_ids.txt 2>/dev/null
python3 -c "
import json;g=json.load(open('tests/data/demo_golden.json'))['cases'][0]['greedy_ids'][:32]
h=[int(x) for x in open('$OUT/demo_ids.txt').read().split('\n')[0].split()]
print('demo greedy on cuda == transformers golden:', h==g, h[:8], g[:8])"
echo "== ops test cuda"
timeout 170 $OPS test -b cuda > "$OUT"/ops-cuda.txt 2>&1; echo "rc $?"
grep -E "^  (FAIL|SKIP)|passed, " $OUT/ops-cuda.txt | tail -25
HYBRID_GDN_CHUNK_CLUSTER=0 timeout 40 $OPS test -b cuda -o gdn_chunk_prefill 2>&1 | tail -1
HYBRID_GDN_CHUNK_CLUSTER=4 timeout 40 $OPS test -b cuda -o gdn_chunk_prefill 2>&1 | tail -1
HYBRID_GDN_CHUNK_FUSED=0 timeout 40 $OPS test -b cuda -o gdn_chunk_prefill 2>&1 | tail -1
HYBRID_SSM_CHUNK_V3=0 timeout 40 $OPS test -b cuda -o ssm_chunk_scan 2>&1 | tail -1  # v2
echo "== perf"
P=""; for o in gdn_recurrent gdn_prep_step gdn_chunk_prefill ssm_step ssm_chunk_scan attn_decode attn_prefill linear_q moe_experts rms_norm rms_norm_gated rope silu_mul residual_add conv1d_causal conv1d_update; do P="$P,$o:perf"; done
timeout 150 $OPS perf -b cuda -o "${P#,}" > "$OUT"/perf.txt 2>&1
cut -c1-200 "$OUT"/perf.txt | sed -E 's/lens=([0-9]+\|){3,}[0-9|]*/lens=../' | grep -v "^$" | tail -60
HYBRID_GDN_CHUNK_STAGES=1 timeout 20 $OPS perf -b cuda --reps 1 -o 'gdn_chunk_prefill(prefill,B=1,T=8192,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)' 2>&1 | grep -i "stages" | tail -2
HYBRID_GDN_CHUNK_FUSED=0 HYBRID_GDN_CHUNK_STAGES=1 timeout 20 $OPS perf -b cuda --reps 1 -o 'gdn_chunk_prefill(prefill,B=1,T=8192,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)' 2>&1 | grep -i "stages" | tail -2
HYBRID_SSM_CHUNK_STAGES=1 timeout 20 $OPS perf -b cuda --reps 1 --log debug -o 'ssm_chunk_scan(prefill,1x16384,Q=256,H=80,P=64,N=128,G=1,x=bf16,state=f32,perf)' 2>&1 | grep -i "stages" | tail -2  # v3
echo "== peers"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
timeout 150 python3 scripts/compare_peers.py --lib .carry/libhybrid_c.so --mamba-src .mamba-src --only gdn_decode,ssm_decode,gdn_prefill,ssm_prefill,attn_decode,attn_prefill 2>&1 | grep -v "Warning\|scaled_dot_product" > "$OUT"/peers.txt; cat $OUT/peers.txt | grep "^|\|^#"
echo "== memcheck"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $OPS test -b cuda -o gdn_recurrent,gdn_prep_step,ssm_step,attn_decode 2>&1 | tail -3
