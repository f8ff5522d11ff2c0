#!/usr/bin/env bash
# A whole GPU check from carried binaries in one call, most important first so that a time limit
# cuts the least: every CUDA op's cases (one op per run, each under its own limit, so a kernel
# that hangs names its case and costs one limit), the fallback variants, the engine's CUDA tests,
# the benchmark shapes (graph-timed), the stage timers, the peers, then the sanitizers.
#   here:            scripts/device-carry.sh
#   GPU machine:     scripts/device-quick.sh    (device tool: carry [".carry", ".whl", ".mamba-src"])
# Session 3's timings on the H200 (start ~30 s): op tests ~3 min, perf ~2.5 min, the peers ~2.5 min
# with FLA's prefill autotuning, memcheck of the GDN and SSM ops > 100 s: the whole script needs
# more than one 600 s call, so SECTIONS picks (default all): tests,fallbacks,unit,perf,variants,
# stages,peers,sanitizers.
# Everything it prints also goes to $OUT/final.log; the other logs are in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-quick-logs}
SECTIONS=${SECTIONS:-tests,fallbacks,unit,perf,variants,stages,peers,sanitizers}  # fallbacks_old, optests, ab, profile, focus, engine, wsout, wsnext, wspt, trace, memsw, wgprefill, wgab, gdnab, ssmab, attnsplits, ssmcb: ask for them
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/final.log") 2>&1
tar xJf .carry/bin.tar.xz -C .carry || exit 1
OPS=.carry/hybrid-ops
# A build with -DHYBRID_CUDNN=ON (attn_prefill.cudnn) links libcudnn.so.9 dynamically: take the
# one of the pip package nvidia-cudnn-cu13 (torch's; 9.19 in session 6) before the system's (the
# GPU machine's /usr/lib has 9.14, whose engine choice is slower than fa2c: attn_prefill.cudnn
# refuses cuDNN older than 9.19, so the system library would leave the cases to fa2c).
if ldd "$OPS" | grep -q 'libcudnn.so.9'; then
  # nvidia/cudnn/lib in the cu12 wheels; searched anywhere under nvidia/ in case cu13 moved it.
  cudnn_lib=$(python3 -c 'import glob, os, site, sys
for r in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    hits = sorted(glob.glob(os.path.join(r, "nvidia", "**", "libcudnn.so.9"), recursive=True))
    if hits: print(os.path.dirname(hits[0])); break' 2>/dev/null)
  if [ -n "$cudnn_lib" ] && [ -e "$cudnn_lib/libcudnn.so.9" ]; then
    export LD_LIBRARY_PATH="$cudnn_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "libcudnn.so.9 from $cudnn_lib"
  else
    echo "libcudnn.so.9 not found (no nvidia-cudnn-cu13 pip package either): $OPS cannot start"
  fi
fi
start=$(date +%s)
section() { echo "[t+$(($(date +%s) - start))s] == $1"; [[ ",$SECTIONS," == *",$1,"* ]]; }
# test_one LABEL LIMIT "ENV=.. ENV=.." OPS: the cases of OPS, TEST_JOBS (default 8) at once
# (hybrid-ops test -j: the CPU reference is most of a case's time; lines still in case order, so
# on a time-out the hung case is among the few after the last line; TEST_JOBS=1 names it exactly),
# one line per case as it ends
# (stdbuf: a killed run keeps its lines), then the summary, the failures, and on a time-out the last
# case that finished.
test_one() {
  local label=$1 limit=$2 envs=$3 ops=$4
  env $envs stdbuf -oL timeout "$limit" $OPS test -b cuda -v -j "${TEST_JOBS:-8}" -o "$ops" \
    > "$OUT/t_$label.txt" 2>&1
  local rc=$?
  echo "$label: rc $rc, $(grep -E 'passed, ' "$OUT/t_$label.txt" | tail -1)"
  grep -E "^  FAIL" "$OUT/t_$label.txt" | cut -c1-220 | head -5
  if [ $rc = 124 ]; then
    echo "  time limit after: $(grep -E '^  (OK|FAIL|SKIP)' "$OUT/t_$label.txt" | tail -1 | cut -c1-200)"
  fi
}
# ab_perf ENV OP: OP's benchmark shapes by default and under ENV, alternated twice (the first
# 125 characters of each line: the case, the median and minimum µs, GB/s).
ab_perf() {
  local ab_env=$1 op=$2
  for pass in 1 2; do
    for e in X=1 "$ab_env"; do
      echo "-- $e, pass $pass"
      env $e timeout 150 $OPS perf -b cuda -o "$op:perf" 2>&1 | grep "^$op" | cut -c1-125
    done
  done
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

if section tests; then
  for op in $($OPS list | awk 'NR > 1 && $2 ~ /^[0-9]+$/ {print $1}'); do test_one "$op" 90 X=1 "$op"; done
fi
if section optests; then
  # The cases of some ops only (TEST_OPS, space-separated; not in the default SECTIONS).
  for op in ${TEST_OPS:-attn_prefill}; do test_one "$op" 120 X=1 "$op"; done
fi
if section fallbacks; then
  # The switches under today's defaults whose variants changed last (sessions 5-6): the opt-in
  # cuDNN attn_prefill (builds with -DHYBRID_CUDNN=ON; without it the switch changes nothing; with
  # cuDNN 9.19 its NaN-tail case fails: attention_cudnn.cu), fa2c under cuda_wg (session 22), fa2b
  # under fa2c, GDN / SSM decode
  # warp2 under the tile kernels, and linear_q v6 and v5 on every shape they take (the older layers:
  # fallbacks_old).
  test_one gdn_chunk_pipe4 60 HYBRID_GDN_CHUNK_PIPE_CHUNKS=4 gdn_chunk_prefill
  test_one gdn_chunk_v7 60 HYBRID_GDN_CHUNK_PIPE=0 gdn_chunk_prefill
  test_one gdn_decode_warp2 90 HYBRID_GDN_DECODE_TILE=0 gdn_recurrent,gdn_prep_step
  test_one ssm_step_warp2 60 HYBRID_SSM_STEP_TILE=0 ssm_step
  test_one attn_prefill_cudnn 40 HYBRID_ATTN_PREFILL_CUDNN=1 attn_prefill
  test_one attn_prefill_fa2c 40 HYBRID_ATTN_PREFILL_WG=0 attn_prefill
  test_one attn_prefill_fa2b 40 "HYBRID_ATTN_PREFILL_WG=0 HYBRID_ATTN_PREFILL_V5=0" attn_prefill
  test_one moe_v4 40 "HYBRID_MOE_EXPERTS_V6=0 HYBRID_MOE_EXPERTS_TC=0" moe_experts
  test_one moe_q_v1 40 "HYBRID_MOE_Q_V2=0 HYBRID_MOE_Q_TC=0" moe_experts_q
  test_one linear_q_v7_all 40 "HYBRID_LINEAR_Q_V7_ANY=1 HYBRID_LINEAR_Q_V5_MIN_CODES=0" linear_q
  test_one linear_q_v6_all 40 "HYBRID_LINEAR_Q_V7=0 HYBRID_LINEAR_Q_V5_MIN_CODES=0" linear_q
  test_one linear_q_v5_all 40 "HYBRID_LINEAR_Q_V7=0 HYBRID_LINEAR_Q_V6=0 HYBRID_LINEAR_Q_V5_MIN_CODES=0" linear_q
fi
if section fallbacks_old; then
  # Every older layer by its switches (all passed in session 4's run G).
  test_one gdn_chunk_v5 40 HYBRID_GDN_CHUNK_V7=0 gdn_chunk_prefill
  test_one gdn_chunk_unclustered 40 HYBRID_GDN_CHUNK_CLUSTER=0 gdn_chunk_prefill
  test_one gdn_decode_v4 75 HYBRID_GDN_DECODE_V5=0 gdn_recurrent
  test_one gdn_prep_v4 40 HYBRID_GDN_DECODE_V5=0 gdn_prep_step
  test_one gdn_decode_v5_nocs 90 HYBRID_DECODE_V5_CS=0 gdn_recurrent,ssm_step
  test_one gdn_decode_v2 90 "HYBRID_GDN_DECODE_V5=0 HYBRID_GDN_DECODE_V4=0" gdn_recurrent,gdn_prep_step
  test_one ssm_step_v4 40 HYBRID_SSM_STEP_V5=0 ssm_step
  test_one ssm_step_v3 60 "HYBRID_SSM_STEP_V5=0 HYBRID_SSM_STEP_V4=0" ssm_step
  test_one ssm_chunk_v3 40 HYBRID_SSM_CHUNK_V6=0 ssm_chunk_scan
  test_one ssm_chunk_v2 40 "HYBRID_SSM_CHUNK_V6=0 HYBRID_SSM_CHUNK_V3=0" ssm_chunk_scan
  test_one attn_prefill_fa2 40 "HYBRID_ATTN_PREFILL_V5=0 HYBRID_ATTN_PREFILL_V4=0" attn_prefill
  test_one attn_decode_v4 40 HYBRID_ATTN_DECODE_V5=0 attn_decode
  test_one attn_decode_v3 40 "HYBRID_ATTN_DECODE_V5=0 HYBRID_ATTN_DECODE_V4=0" attn_decode
  test_one linear_q_v4 40 HYBRID_LINEAR_Q_V5=0 linear_q
  test_one linear_q_v3 40 "HYBRID_LINEAR_Q_V5=0 HYBRID_LINEAR_Q_V4=0" linear_q
  test_one moe_v3 40 "HYBRID_MOE_EXPERTS_V6=0 HYBRID_MOE_EXPERTS_V4=0 HYBRID_MOE_EXPERTS_TC=0" moe_experts
fi
if section unit; then
  filter='CudaGraph.*:Parity.*:*Cuda*:DemoModel*'
  [ -x .carry/hybrid ] && filter="$filter:Cli.*"
  (cd .carry && HYBRID_CLI=$PWD/hybrid timeout 90 ./hybrid_unit_tests --gtest_filter="$filter") \
    > "$OUT"/unit.txt 2>&1
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran" "$OUT"/unit.txt
  if [ -x .carry/hybrid ]; then
    timeout 30 .carry/hybrid run --ids 950,260,2381 -n 32 --print-ids > "$OUT"/demo_ids.txt 2>/dev/null
    python3 -c "
import json;g=json.load(open('tests/data/demo_golden.json'))['cases'][0]['greedy_ids'][:32]
h=[int(x) for x in open('$OUT/demo_ids.txt').read().split('\n')[0].split()]
print('demo greedy on cuda == transformers golden:', h==g, h[:8], g[:8])"
  fi
fi
if section perf; then
  # PERF_OPS (ops joined by spaces) replaces the list.
  P=""
  for o in ${PERF_OPS:-gdn_recurrent gdn_prep_step gdn_chunk_prefill ssm_step ssm_chunk_scan \
      attn_decode attn_prefill linear_q moe_experts rms_norm rms_norm_gated rope silu_mul \
      residual_add conv1d_causal conv1d_update}; do P="$P,$o:perf"; done
  timeout 300 $OPS perf -b cuda -o "${P#,}" > "$OUT"/perf.txt 2>&1
  cut -c1-200 "$OUT"/perf.txt | sed -E 's/lens=([0-9]+\|){3,}[0-9|]*/lens=../' | grep -v "^$"
fi
if section variants; then
  # The variant each default replaced, timed in the same run (perf shapes of the op, switch on;
  # several switches joined by commas).
  # VARIANTS (pairs joined by ';') replaces the list.
  IFS=';' read -ra pairs <<< "${VARIANTS:-}"
  ((${#pairs[@]})) || pairs=("HYBRID_GDN_DECODE_TILE=0 gdn_recurrent,gdn_prep_step" "HYBRID_SSM_STEP_TILE=0 ssm_step" "HYBRID_GDN_CHUNK_V7=0 gdn_chunk_prefill" "HYBRID_SSM_CHUNK_V6=0 ssm_chunk_scan"
    "HYBRID_LINEAR_Q_V7=0 linear_q" "HYBRID_LINEAR_Q_V7=0,HYBRID_LINEAR_Q_V6=0 linear_q" "HYBRID_LINEAR_Q_V5_MIN_CODES=0 linear_q" "HYBRID_GDN_DECODE_V5=0 gdn_recurrent,gdn_prep_step"
    "HYBRID_SSM_STEP_V5=0 ssm_step" "HYBRID_ATTN_DECODE_V5=0 attn_decode"
    "HYBRID_ATTN_PREFILL_CUDNN=1 attn_prefill" "HYBRID_ATTN_PREFILL_V5=0 attn_prefill"
    "HYBRID_MOE_EXPERTS_V6=0 moe_experts")
  for pair in "${pairs[@]}"; do
    set -- $pair
    echo "-- $1"
    env $(echo "$1" | tr , ' ') timeout 60 $OPS perf -b cuda -o "$(echo "$2" | sed 's/,/:perf,/g'):perf" \
      2>&1 | cut -c1-200 |
      sed -E 's/lens=([0-9]+\|){3,}[0-9|]*/lens=../' | grep -v "^$"
  done
fi
if section ab; then
  # A change without a switch against the build before it, in the same run: AB_BASE (default
  # .carry-base, from `CARRY_DIR=.carry-base scripts/device-carry.sh` on the base commit) and
  # .carry alternated twice over AB_OPS' benchmark shapes, then both builds' GDN stage timers.
  base=${AB_BASE:-.carry-base}
  if tar xJf "$base/bin.tar.xz" -C "$base"; then
    P=""
    for o in ${AB_OPS:-gdn_chunk_prefill}; do P="$P,$o:perf"; done
    for pass in 1 2; do
      for side in "$base" .carry; do
        echo "-- ab pass $pass: $side"
        timeout 120 "$side/hybrid-ops" perf -b cuda -o "${P#,}" 2>&1 | cut -c1-200 |
          grep -v "^$" | grep -v "^device\|^L2 flush\|^case"
      done
    done
    G='gdn_chunk_prefill(prefill,B=1,T=8192,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)'
    for side in "$base" .carry; do
      echo "-- ab stages: $side"
      HYBRID_GDN_CHUNK_STAGES=1 timeout 20 "$side/hybrid-ops" perf -b cuda --reps 3 -o "$G" 2>&1 |
        grep -i "stages" | tail -1
    done
  else
    echo "ab: no $base/bin.tar.xz (CARRY_DIR=$base scripts/device-carry.sh on the base commit)"
  fi
fi
if section stages; then
  G='gdn_chunk_prefill(prefill,B=1,T=8192,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)'
  M='ssm_chunk_scan(prefill,1x16384,Q=256,H=80,P=64,N=128,G=1,x=bf16,state=f32,perf)'
  HYBRID_GDN_CHUNK_STAGES=1 timeout 20 $OPS perf -b cuda --reps 3 -o "$G" 2>&1 | grep -i "stages" | tail -1
  HYBRID_SSM_CHUNK_STAGES=1 timeout 20 $OPS perf -b cuda --reps 3 --log debug -o "$M" 2>&1 | grep -i "stages" | tail -1
fi
if section peers; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site
  timeout 240 python3 scripts/compare_peers.py --lib .carry/libhybrid_c.so --mamba-src .mamba-src \
    --only "${PEERS_ONLY:-gdn_decode,ssm_decode,gdn_prefill,ssm_prefill,attn_decode,attn_prefill}" 2>&1 |
    grep -v "Warning\|scaled_dot_product" > "$OUT"/peers.txt
  grep "^|\|^#" "$OUT"/peers.txt
fi
if section profile; then
  # Nsight Compute on the kernels that bound the open targets (not in the default SECTIONS: ask
  # for it). Per kernel: the details page (speed of light, occupancy, warp states, scheduler,
  # memory) and, where this ncu prints it, the per-instruction SASS source page with its stall
  # samples (CSV). --clock-control none: leave the clocks as the benchmarks ran them.
  NCU="ncu --clock-control none"
  prof_one() {  # LABEL KERNEL-REGEX CASE-OR-OP
    local label=$1 kern=$2 case=$3
    # PROFILE_ONLY (labels joined by commas) picks some of them.
    [[ -z "${PROFILE_ONLY:-}" || ",$PROFILE_ONLY," == *",$label,"* ]] || return 0
    timeout 150 $NCU -k "regex:$kern" -c 1 --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section LaunchStats --section SourceCounters $OPS perf -b cuda --reps 1 -o "$case" \
      > "$OUT/ncu_$label.txt" 2>&1
    echo "ncu $label: rc $? $(grep -E 'Duration|Achieved Occupancy|Issue Slots Busy' "$OUT/ncu_$label.txt" | tr -s ' ' | head -3 | tr '\n' ';')"
    timeout 150 $NCU -k "regex:$kern" -c 1 --section SourceCounters --section WarpStateStats \
      --page source --print-source sass --csv $OPS perf -b cuda --reps 1 -o "$case" \
      > "$OUT/ncu_${label}_sass.csv" 2>&1
    echo "ncu $label source page: rc $? ($(wc -l < "$OUT/ncu_${label}_sass.csv") lines)"
  }
  G='gdn_chunk_prefill(prefill,B=1,T=8192,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)'
  M='ssm_chunk_scan(prefill,1x16384,Q=256,H=80,P=64,N=128,G=1,x=bf16,state=f32,perf)'
  R='gdn_recurrent(decode,B=256,Hk=16,Hv=32,K=128,V=128,state=f32,perf)'
  L='linear_q(T=1,in=2048,out=151936,bits=4,group=64,scales=bf16,x=bf16,y=bf16,perf)'
  prof_one gdn_spine spine_tc_kernel "$G"
  prof_one gdn_stage1 wu_tc5_kernel "$G"
  prof_one gdn_pair wu_pair_kernel "$G"
  prof_one gdn_stage3 output_tc_kernel "$G"
  prof_one ssm_dt scan_dt_kernel "$M"
  prof_one ssm_state v6_state_kernel "$M"
  prof_one ssm_out v6_out_kernel "$M"
  # (with HYBRID_SSM_CHUNK_OUT_WG=2 in the environment: the warp-specialised output)
  prof_one ssm_out_ws out_ws_kernel "$M"
  prof_one gdn_decode gdn_tile_kernel "$R"
  prof_one gdn_decode_b64 gdn_tile_kernel "${R/B=256/B=64}"
  # gdn_prep_step on the same tile kernel ran 5% faster than gdn_recurrent at B 256 (269 against
  # 284 µs, session 6 run 8) for the same state bytes: its profile beside gdn_decode's.
  prof_one gdn_prep_decode gdn_tile_kernel "${R/gdn_recurrent/gdn_prep_step}"
  prof_one lm_head gemv_v7_kernel "$L"
  A='attn_decode(N=1,lens=32768,Hq=16,Hkv=2,D=256,page=16,window=0,scale=1/sqrt(D),act=bf16,cache=bf16,perf)'
  E='moe_experts(T=1,E=512,k=10,Dm=2048,I=512,x=bf16,w=bf16,swiglu,ids=i32,perf)'
  prof_one attn_decode_b1 decode_tc_kernel "$A"
  prof_one moe_gate_up "moe_gate_up_(v6_)?kernel" "$E"
  prof_one moe_down "moe_down_combine_(v6_)?kernel" "$E"
  # attn_prefill: fa2c, and the wgmma kernel (PROFILE_WG=1..6 picks its form, default 4).
  P='attn_prefill(N=1,lens=4096,new=4096,Hq=16,Hkv=2,D=256,page=64,window=0,scale=1/sqrt(D),act=bf16,cache=bf16,perf)'
  HYBRID_ATTN_PREFILL_WG=0 prof_one attn_prefill_fa2c prefill_fa2c_kernel "$P"
  HYBRID_ATTN_PREFILL_WG=${PROFILE_WG:-4} prof_one attn_prefill_wg prefill_wg_kernel "$P"
  # The peers' kernels at the same shapes, for a side-by-side of what separates them (FLA's decode
  # reaches 98% of copy against our 87-95%; mamba_ssm's chunk scan). Needs the peers' wheels and
  # source (carry .whl, .mamba-src), as the peers section does; -c 1 takes the first launch
  # after ncu's kernel filter.
  prof_peer() {  # LABEL KERNEL-REGEX ONLY [NCU-ARGS]
    local label=$1 kern=$2 only=$3
    shift 3
    [[ -z "${PROFILE_ONLY:-}" || ",$PROFILE_ONLY," == *",$label,"* ]] || return 0
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site
    timeout 200 $NCU -k "regex:$kern" -c 1 "$@" --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      --section LaunchStats python3 scripts/compare_peers.py --lib .carry/libhybrid_c.so \
      --mamba-src .mamba-src --only "$only" ${PEER_ARGS:-} > "$OUT/ncu_$label.txt" 2>&1
    echo "ncu $label: rc $? $(grep -E 'Duration|Achieved Occupancy|DRAM Throughput' "$OUT/ncu_$label.txt" | tr -s ' ' | head -3 | tr '\n' ';')"
  }
  # FLA at B 64 and 256 alone (--decode-batches): -c 1 takes its first (eager) call, before the
  # graph replays (-s 4 on the three batches of session 6 still caught a B 1 launch).
  PEER_ARGS="--decode-batches 64" prof_peer fla_decode_b64 fused_recurrent gdn_decode
  PEER_ARGS="--decode-batches 256" prof_peer fla_decode fused_recurrent gdn_decode
  prof_peer mamba_chunk_scan _chunk_scan_fwd ssm_prefill
fi
if section engine; then
  # The engine at full width (not in the default SECTIONS: ask for it; carry the `hybrid` binary,
  # CARRY_BINS="hybrid-ops hybrid_unit_tests libhybrid_c.so hybrid"). scripts/make_bench_model.py
  # writes Qwen3-Next-80B's config cut to ENGINE_LAYERS (default 4) layers with random bf16 weights
  # into /tmp/bench-model (init on the GPU); then `hybrid bench` for pp512, pp4096 and tg32, and
  # Nsight Compute's per-kernel time of ENGINE_STEPS decode steps (no CUDA graph, so each kernel
  # is its own launch), summed by kernel name: where a decode token's time goes.
  BM=/tmp/bench-model
  [ -e $BM/config.json ] || timeout 200 python3 scripts/make_bench_model.py $BM \
    --layers "${ENGINE_LAYERS:-4}" 2>&1 | tail -1
  timeout 120 .carry/hybrid bench -m $BM --device cuda -p 512 -n 32 -r 3 2>&1 | tail -3
  timeout 90 .carry/hybrid bench -m $BM --device cuda -p 4096 -n 0 -r 2 2>&1 | tail -1
  timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    .carry/hybrid bench -m $BM --device cuda -p 0 -n "${ENGINE_STEPS:-4}" -r 1 --no-graph \
    > "$OUT/engine_ncu.csv" 2>/dev/null
  echo "engine ncu: rc $?"
  python3 - "$OUT/engine_ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; rows = rows[1:]
k, v, u = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows:
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[r[u]]
    name = r[k].replace("(anonymous namespace)::", "").replace("void ", "")
    name = name.split("(")[0].split("<")[0]
    tot[name] += float(r[v].replace(",", "")) * scale; cnt[name] += 1
all_us = sum(tot.values())
print(f"{len(rows)} kernels, {all_us:.0f} us in all (bench's warm-up and one run: each a "
      f"1-token prompt, then the decode steps)")
for name, us in sorted(tot.items(), key=lambda x: -x[1])[:25]:
    print(f"  {us:9.1f} us {100 * us / all_us:5.1f}%  x{cnt[name]:<5} {name[:90]}")
PY
fi
if section focus; then
  # One change checked in one call (not in the default SECTIONS): the cases of FOCUS_OPS (ops
  # joined by commas) under each switch set of FOCUS_SWITCHES (sets joined by ';', switches in a
  # set by spaces; default "X=1", the defaults), memcheck and racecheck of FOCUS_SAN_OPS, FOCUS_CASE
  # (a perf case) timed under each switch set in its own process (the MoE case spends ~25 s making
  # its weights), then ncu of the kernels matching FOCUS_KERNELS (a regex; FOCUS_NCU_COUNT
  # launches, default 2) on FOCUS_CASE under the first set. Session 8's runs 1-5, as one section.
  IFS=';' read -ra sets <<< "${FOCUS_SWITCHES:-X=1}"
  for set in "${sets[@]}"; do
    test_one "focus_$(echo "$set" | tr -c 'A-Za-z0-9_\n' _)" 90 "$set" "$FOCUS_OPS"
  done
  # FOCUS_SAN_OPS (default FOCUS_OPS): the ops checked by memcheck and racecheck, one run per
  # (tool, op) under its own 150 s limit.
  for op in $(echo "${FOCUS_SAN_OPS:-$FOCUS_OPS}" | tr , ' '); do
    for tool in memcheck racecheck; do
      timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 3 $OPS test -b cuda -v -o "$op" \
        > "$OUT/focus_${tool}_$op.txt" 2>&1
      echo "$tool $op: rc $? ($(grep -cE '^  OK' "$OUT/focus_${tool}_$op.txt") cases OK)" \
        "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/focus_${tool}_$op.txt" | tail -1)"
    done
  done
  if [ -n "${FOCUS_CASE:-}" ]; then
    for set in "${sets[@]}"; do
      echo "-- $set: $(env $set timeout 90 $OPS perf -b cuda -o "$FOCUS_CASE" 2>&1 | grep -F "${FOCUS_CASE%%(*}(" | cut -c1-200 | sed -E 's/^[^ ]+ +//')"
    done
    if [ -n "${FOCUS_KERNELS:-}" ]; then
      env ${sets[0]} timeout 120 ncu --clock-control none -k "regex:$FOCUS_KERNELS" -c "${FOCUS_NCU_COUNT:-2}" \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
        --section MemoryWorkloadAnalysis --section LaunchStats \
        $OPS perf -b cuda --reps 1 -o "$FOCUS_CASE" > "$OUT/focus_ncu.txt" 2>&1
      echo "ncu: rc $?"
      grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Achieved Occupancy|Eligible Warps|Issued Warp|Registers Per" \
        "$OUT/focus_ncu.txt" | tr -s ' ' | cut -c1-120
    fi
  fi
fi
if section wsout; then
  # The warpgroup spine's fused output (not in the default SECTIONS; by default it runs wherever
  # the warpgroup spine does, see wspt): with HYBRID_GDN_CHUNK_WS_OUT=1 its
  # cases in the pipeline, outside it and in pieces of 4, racecheck on the pipelined case, then
  # the benchmark shapes with it never (0) and always (1), alternated.
  test_one gdn_ws_out 90 HYBRID_GDN_CHUNK_WS_OUT=1 gdn_chunk_prefill
  test_one gdn_ws_out_v7 90 "HYBRID_GDN_CHUNK_WS_OUT=1 HYBRID_GDN_CHUNK_WS_SPINE=1" gdn_chunk_prefill
  test_one gdn_ws_out_pipe4 90 "HYBRID_GDN_CHUNK_WS_OUT=1 HYBRID_GDN_CHUNK_PIPE_CHUNKS=4" \
    gdn_chunk_prefill
  P='gdn_chunk_prefill(T=8400,lens=[8400],slots=[1],init=[1],pool_rows=2,Hk=4,Hv=16,K=128,V=128,x=bf16,pool=f32,out=f32,l2norm,ckpt_every=320)'
  HYBRID_GDN_CHUNK_WS_OUT=1 timeout 200 compute-sanitizer --tool racecheck $OPS test -b cuda -o "$P" \
    2>&1 | tail -2
  for pass in 1 2; do
    for w in 0 1; do
      echo "-- HYBRID_GDN_CHUNK_WS_OUT=$w, pass $pass"
      HYBRID_GDN_CHUNK_WS_OUT=$w timeout 150 $OPS perf -b cuda -o gdn_chunk_prefill:perf 2>&1 |
        grep "^gdn" | cut -c1-140
    done
  done
fi
if section wsnext; then
  # What bounds the pipeline with the fused output (session 18's open question; not in the default
  # SECTIONS): the stage timer with the warpgroup spine alone, without and with its output (stage 1
  # and the spine's time apart), a sweep of the pipeline's piece size with the output at 1 x 8192
  # and 1 x 32768 (the default pieces, unfused, for reference), then ncu of the fused spine's first
  # piece and of stage 1 (details and the SASS source page with stall samples).
  G='gdn_chunk_prefill(prefill,B=1,T=8192,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)'
  G4='gdn_chunk_prefill(prefill,B=1,T=32768,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)'
  for c in "$G" "$G4"; do
    for w in 0 1; do
      echo "-- stages, warpgroup spine, HYBRID_GDN_CHUNK_WS_OUT=$w"
      HYBRID_GDN_CHUNK_STAGES=1 HYBRID_GDN_CHUNK_WS_SPINE=1 HYBRID_GDN_CHUNK_WS_OUT=$w timeout 30 \
        $OPS perf -b cuda --reps 3 -o "$c" 2>&1 | grep -i "stages" | tail -1
    done
  done
  for m in 0 16 32 48 64 96; do
    w=1; [ $m = 0 ] && w=0
    echo "-- HYBRID_GDN_CHUNK_WS_OUT=$w HYBRID_GDN_CHUNK_PIPE_CHUNKS=$m (0: the default pieces)"
    HYBRID_GDN_CHUNK_WS_OUT=$w HYBRID_GDN_CHUNK_PIPE_CHUNKS=$m timeout 60 \
      $OPS perf -b cuda -o "$G,$G4" 2>&1 | grep "^gdn" | cut -c1-125
  done
  for k in spine_ws wu_tc5_kernel; do
    HYBRID_GDN_CHUNK_WS_OUT=1 timeout 150 ncu --clock-control none -k "regex:$k" -c 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis $OPS perf -b cuda --reps 1 -o "$G" > "$OUT/ncu_wsnext_$k.txt" 2>&1
    echo "ncu $k: rc $? $(grep -E 'Duration|Achieved Occupancy|DRAM Throughput' "$OUT/ncu_wsnext_$k.txt" |
      tr -s ' ' | head -3 | tr '\n' ';')"
    HYBRID_GDN_CHUNK_WS_OUT=1 timeout 150 ncu --clock-control none -k "regex:$k" -c 1 \
      --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
      $OPS perf -b cuda --reps 1 -o "$G" > "$OUT/ncu_wsnext_${k}_sass.csv" 2>&1
  done
fi
if section wspt; then
  # The fused output with P̃ from stage 1 (session 19; the pipeline's default): the cases with it
  # forced everywhere (HYBRID_GDN_CHUNK_WS_PT=1: outside the pipeline too, with the warpgroup spine
  # taken for every unsplit spine) and never (=0, the producer computes P̃), memcheck and
  # racecheck on the pipelined case, the stage timer with each form alone, then the benchmark
  # shapes by default, with P̃ never from stage 1, and unfused, alternated.
  test_one gdn_ws_pt 90 "HYBRID_GDN_CHUNK_WS_OUT=1 HYBRID_GDN_CHUNK_WS_PT=1 HYBRID_GDN_CHUNK_WS_SPINE=1" \
    gdn_chunk_prefill
  test_one gdn_ws_pt_pipe4 90 "HYBRID_GDN_CHUNK_WS_OUT=1 HYBRID_GDN_CHUNK_WS_PT=1 HYBRID_GDN_CHUNK_PIPE_CHUNKS=4" \
    gdn_chunk_prefill
  test_one gdn_ws_nopt 90 "HYBRID_GDN_CHUNK_WS_OUT=1 HYBRID_GDN_CHUNK_WS_PT=0" gdn_chunk_prefill
  P='gdn_chunk_prefill(T=8400,lens=[8400],slots=[1],init=[1],pool_rows=2,Hk=4,Hv=16,K=128,V=128,x=bf16,pool=f32,out=f32,l2norm,ckpt_every=320)'
  for tool in memcheck racecheck; do
    echo "$tool, pipelined case: $(timeout 200 compute-sanitizer --tool $tool $OPS test -b cuda -o "$P" 2>&1 | tail -1)"
  done
  G='gdn_chunk_prefill(prefill,B=1,T=8192,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)'
  for w in 0 1; do
    echo "-- stages, warpgroup spine with the output, HYBRID_GDN_CHUNK_WS_PT=$w"
    HYBRID_GDN_CHUNK_STAGES=1 HYBRID_GDN_CHUNK_WS_SPINE=1 HYBRID_GDN_CHUNK_WS_OUT=1 HYBRID_GDN_CHUNK_WS_PT=$w \
      timeout 30 $OPS perf -b cuda --reps 3 -o "$G" 2>&1 | grep -i "stages" | tail -1
  done
  for pass in 1 2; do
    for sw in X=1 HYBRID_GDN_CHUNK_WS_PT=0 HYBRID_GDN_CHUNK_WS_OUT=0; do
      echo "-- $sw, pass $pass"
      env $sw timeout 150 $OPS perf -b cuda -o gdn_chunk_prefill:perf 2>&1 | grep "^gdn" | cut -c1-125
    done
  done
fi
if section trace; then
  # The GDN prefill pipeline's kernel timeline (scripts/trace_gdn_pipeline.py: CUPTI through
  # torch.profiler, the graph as the benchmarks replay it; not in the default SECTIONS): each
  # piece's stage 1 and spine, and how long the spine waited at each boundary, in the default
  # plan and the even one. Needs libhybrid_c.so in the carry.
  for r in 0 100; do
    echo "-- HYBRID_GDN_CHUNK_PIPE_RATIO=$r (0: the default plan, 100: the even one)"
    HYBRID_GDN_CHUNK_PIPE_RATIO=$r timeout 150 python3 scripts/trace_gdn_pipeline.py \
      --lib .carry/libhybrid_c.so --T 8192,32768 --reps 2 2>&1 | tee -a "$OUT/trace.txt" |
      grep -v "^ *[0-9.]* *[0-9.]* *[0-9.]* *s[0-9]"  # the per-kernel lines: in trace.txt
  done
  # The plans at the lengths between the measured ones, alternated: 1 x 16384 (257 chunks, the even
  # plan by default since session 21) and 1 x 24576 (385, r 65 by default): where between 257
  # and 513 chunks r 65 starts to beat the even plan.
  G='gdn_chunk_prefill(prefill,B=1,T=16384,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)'
  for r in 0 100 65 0 100 65; do
    echo "-- HYBRID_GDN_CHUNK_PIPE_RATIO=$r: $(HYBRID_GDN_CHUNK_PIPE_RATIO=$r timeout 60 $OPS perf -b cuda \
      -o "$G,${G/T=16384/T=24576}" 2>&1 | grep "^gdn" | awk '{print $1, $2}' | tr '\n' ' ')"
  done
fi
if section memsw; then
  # The memory-bound ops at streaming scale under session 22's defaults and the ones before (not in
  # the default SECTIONS): rms_norm / rms_norm_gated teams with up to 4 vectors a thread (=2: at most
  # 2, before) and rope's inv_freq from the host (=0: computed per block, before). Each switch's
  # cases first, then the benchmark shapes (microseconds, then % of copy), alternated.
  test_one norm_per2 90 HYBRID_NORM_MAX_PER=2 rms_norm,rms_norm_gated
  test_one rope_devfreq 90 HYBRID_ROPE_HOST_FREQ=0 rope,rope_kv_append_attn_decode
  for pass in 1 2; do
    for envs in "X=1" "HYBRID_NORM_MAX_PER=2" "HYBRID_ROPE_HOST_FREQ=0"; do
      echo "-- $envs: $(env $envs timeout 60 $OPS perf -b cuda -o rms_norm:perf,rms_norm_gated:perf,rope:perf 2>&1 |
        grep -E '^(rms|rope)' | awk '{print $2, $5}' | tr '\n' ' ')"
    done
  done
fi
if section wgprefill; then
  # attn_prefill.cuda_wg's forms (HYBRID_ATTN_PREFILL_WG=1..6; 4 is the default, 0 turns it off so
  # that fa2c runs; not in the default SECTIONS): every attn_prefill case under each form of
  # WG_FORMS (default "1 2 3 4 5 6"; D 64 and windowed cases fall back to fa2c / fa2), memcheck and
  # racecheck under each of WG_SAN_FORMS (default "4 6"), synccheck under WG_SYNC_FORMS (default
  # "6": the producer form's mbarriers), whether the benchmark shapes take cuda_wg (no "cuda_wg
  # refused" line at debug level), then the shapes under 0 and each form, and again under WG_PASS2
  # (default "0 4 5 6"), alternated. A form that hangs is cut by the time limits (test 90 s).
  for w in ${WG_FORMS:-1 2 3 4 5 6}; do
    test_one attn_prefill_wg$w 90 HYBRID_ATTN_PREFILL_WG=$w attn_prefill
  done
  for w in ${WG_SAN_FORMS:-4 6}; do
    for tool in memcheck racecheck; do
      echo "$tool attn_prefill, HYBRID_ATTN_PREFILL_WG=$w: $(HYBRID_ATTN_PREFILL_WG=$w timeout 150 compute-sanitizer --tool $tool $OPS test -b cuda -o attn_prefill 2>&1 | tail -1)"
    done
  done
  for w in ${WG_SYNC_FORMS:-6}; do
    echo "synccheck attn_prefill, HYBRID_ATTN_PREFILL_WG=$w: $(HYBRID_ATTN_PREFILL_WG=$w timeout 150 compute-sanitizer --tool synccheck $OPS test -b cuda -o attn_prefill 2>&1 | tail -1)"
  done
  echo "wg refusals on the benchmark shapes: $(timeout 60 $OPS perf -b cuda --reps 1 --log debug -o attn_prefill:perf 2>&1 | grep -c 'cuda_wg refused')"
  for w in 0 ${WG_FORMS:-1 2 3 4 5 6} ${WG_PASS2:-0 4 5 6}; do
    echo "-- HYBRID_ATTN_PREFILL_WG=$w: $(HYBRID_ATTN_PREFILL_WG=$w timeout 90 $OPS perf -b cuda -o attn_prefill:perf 2>&1 | grep '^attn' | awk '{print $2, $6}' | tr '\n' ' ')"
  done
fi
if section gdnab; then
  # A GDN prefill switch (GDN_AB_ENV, default HYBRID_GDN_WU_PAIR=0: stage 1 one head a block; not
  # in the default SECTIONS): every gdn_chunk_prefill case by default, under the switch, and with P̃
  # from stage 1 forced everywhere (unpipelined with the warpgroup spine, and pipelined in pieces of
  # 4; with and without the switch), memcheck of the forced cases and under the switch, racecheck
  # under GDN_AB_RACE (default the forced cases), the stage timer under both, then the benchmark
  # shapes under both, alternated twice.
  ab_env=${GDN_AB_ENV:-HYBRID_GDN_WU_PAIR=0}
  PT="HYBRID_GDN_CHUNK_WS_OUT=1 HYBRID_GDN_CHUNK_WS_PT=1 HYBRID_GDN_CHUNK_WS_SPINE=1"
  PT4="HYBRID_GDN_CHUNK_WS_OUT=1 HYBRID_GDN_CHUNK_WS_PT=1 HYBRID_GDN_CHUNK_PIPE_CHUNKS=4"
  test_one gdn_default 90 X=1 gdn_chunk_prefill
  test_one gdn_pt 90 "$PT" gdn_chunk_prefill
  test_one gdn_pt_pipe4 90 "$PT4" gdn_chunk_prefill
  test_one gdn_ab 90 "$ab_env" gdn_chunk_prefill
  test_one gdn_pt_ab 90 "$PT $ab_env" gdn_chunk_prefill
  # (racecheck takes ~150 s for the 34 cases, memcheck ~15 s: racecheck under GDN_AB_RACE only,
  # default the forced P̃.)
  echo "memcheck, gdn_chunk_prefill, $PT: $(env $PT timeout 200 compute-sanitizer --tool memcheck $OPS test -b cuda -o gdn_chunk_prefill 2>&1 | tail -1)"
  echo "memcheck, gdn_chunk_prefill, $ab_env: $(env $ab_env timeout 200 compute-sanitizer --tool memcheck $OPS test -b cuda -o gdn_chunk_prefill 2>&1 | tail -1)"
  race_env=${GDN_AB_RACE:-$PT}
  echo "racecheck, gdn_chunk_prefill, $race_env: $(env $race_env timeout 200 compute-sanitizer --tool racecheck $OPS test -b cuda -o gdn_chunk_prefill 2>&1 | tail -1)"
  G='gdn_chunk_prefill(prefill,B=1,T=8192,Hk=16,Hv=32,K=128,V=128,x=bf16,pool=f32,l2norm,perf)'
  for e in X=1 "$ab_env"; do
    echo "-- stages, $PT, $e: $(env $PT $e HYBRID_GDN_CHUNK_STAGES=1 timeout 30 $OPS perf -b cuda --reps 3 -o "$G" 2>&1 | grep -i "stages" | tail -1 | grep -o 'index.*')"
  done
  ab_perf "$ab_env" gdn_chunk_prefill
fi
if section ssmab; then
  # An ssm_chunk_scan switch (SSM_AB_ENV, default HYBRID_SSM_CHUNK_CHAIN=0: the pass kernel where
  # the chained state kernel is the default, H >= 80; not in the default SECTIONS): every ssm_chunk_scan case under both, memcheck
  # and racecheck under the switch, each kernel's time under ncu (a later call than the first: the
  # stage timer's events put idle gaps before the small kernels) under both, then the benchmark
  # shapes under both, alternated twice. (Session 25 ran it with HYBRID_SSM_CHUNK_STATE_SPLIT=0 and
  # HYBRID_SSM_CHUNK_OUT_WG=1, session 26 with HYBRID_SSM_CHUNK_DT_STAGED=1 and
  # HYBRID_SSM_CHUNK_OUT_WG=2.)
  ab_env=${SSM_AB_ENV:-HYBRID_SSM_CHUNK_CHAIN=0}
  test_one ssm_default 90 X=1 ssm_chunk_scan
  test_one ssm_ab 90 "$ab_env" ssm_chunk_scan
  # SSM_AB_ALSO: one more setting whose cases run (e.g. HYBRID_SSM_CHUNK_OUT_WG=1 when =2 is the switch)
  if [ -n "${SSM_AB_ALSO:-}" ]; then test_one ssm_also 90 "$SSM_AB_ALSO" ssm_chunk_scan; fi
  echo "memcheck, ssm_chunk_scan, $ab_env: $(env $ab_env timeout 150 compute-sanitizer --tool memcheck $OPS test -b cuda -o ssm_chunk_scan 2>&1 | tail -1)"
  echo "racecheck, ssm_chunk_scan, $ab_env: $(env $ab_env timeout 150 compute-sanitizer --tool racecheck $OPS test -b cuda -o ssm_chunk_scan 2>&1 | grep 'RACECHECK SUMMARY' | tail -1)"
  M='ssm_chunk_scan(prefill,1x16384,Q=256,H=80,P=64,N=128,G=1,x=bf16,state=f32,perf)'
  for e in X=1 "$ab_env"; do
    echo "-- kernels (µs), $e: $(env $e timeout 90 ncu --clock-control none -k 'regex:scan_dt|v6_|v2_pass|v3_cb|out_w[gs]' --launch-skip 5 -c 5 --metrics gpu__time_duration.sum $OPS perf -b cuda --reps 2 -o "$M" 2>&1 | grep -oE '(scan_dt|v6_state|v2_pass|v3_cb|v6_out|out_w[gs])_kernel|gpu__time_duration.sum +[a-z]+ +[0-9.]+' | awk '/_kernel/ {k = $1; next} {printf "%s %s; ", k, $NF}')"
  done
  ab_perf "$ab_env" ssm_chunk_scan
fi
if section wgab; then
  # cuda_wg under the default and under WG_AB_ENV (default HYBRID_ATTN_PREFILL_LAZY=0, the lazy
  # rescale off; HYBRID_ATTN_PREFILL_DIAG_MASK=1, ...; not in the default SECTIONS): every
  # attn_prefill case under both, then the benchmark shapes under both, alternated twice.
  # (Session 23 ran it as `wgtma` in run 4, with sanitizers and form 4 beside it, and as `wgpp` in
  # run 6, with a form 7 measured slower and removed; wgprefill has the sanitizers per form.)
  ab_env=${WG_AB_ENV:-HYBRID_ATTN_PREFILL_LAZY=0}
  test_one attn_prefill_default 90 X=1 attn_prefill
  test_one attn_prefill_ab 90 "$ab_env" attn_prefill
  for pass in 1 2; do
    for e in X=1 "$ab_env"; do
      echo "-- $e: $(env $e timeout 90 $OPS perf -b cuda -o attn_prefill:perf 2>&1 | grep '^attn' | awk '{print $2, $6}' | tr '\n' ' ')"
    done
  done
fi
if section attnsplits; then
  # attn_decode at B 1 under other split counts (HYBRID_ATTN_SPLITS, session 19; not in the default
  # SECTIONS): the B 1 cases (32K in pages of 16 and 64, 131K) at each count, the default's first.
  A='attn_decode(N=1,lens=32768,Hq=16,Hkv=2,D=256,page=16,window=0,scale=1/sqrt(D),act=bf16,cache=bf16,perf)'
  A64=${A/page=16/page=64}
  A131='attn_decode(N=1,lens=131072,Hq=16,Hkv=2,D=256,page=64,window=0,scale=1/sqrt(D),act=bf16,cache=bf16,perf)'
  for n in 0 16 33 44 66 99 132 198 256; do
    echo "-- HYBRID_ATTN_SPLITS=$n (0: the default)"
    HYBRID_ATTN_SPLITS=$n timeout 60 $OPS perf -b cuda -o "$A,$A64,$A131" 2>&1 | grep "^attn" |
      sed -E 's/,window=0,scale=1\/sqrt\(D\),act=bf16,cache=bf16,perf//' | cut -c1-120
  done
fi
if section ssmcb; then
  # ssm_chunk_scan's C·Bᵀ tiles in bf16 (the default since session 19; HYBRID_SSM_CHUNK_CB_BF16=0
  # keeps f32; not in the default SECTIONS): its cases, memcheck and racecheck on them, the stage
  # timer and the benchmark shapes without and with it, alternated.
  test_one ssm_cb_bf16 90 HYBRID_SSM_CHUNK_CB_BF16=1 ssm_chunk_scan
  for tool in memcheck racecheck; do
    HYBRID_SSM_CHUNK_CB_BF16=1 timeout 150 compute-sanitizer --tool $tool $OPS test -b cuda \
      -o ssm_chunk_scan 2>&1 | tail -1
  done
  M='ssm_chunk_scan(prefill,1x16384,Q=256,H=80,P=64,N=128,G=1,x=bf16,state=f32,perf)'
  for pass in 1 2; do
    for w in 0 1; do
      echo "-- HYBRID_SSM_CHUNK_CB_BF16=$w, pass $pass"
      HYBRID_SSM_CHUNK_CB_BF16=$w HYBRID_SSM_CHUNK_STAGES=1 timeout 20 $OPS perf -b cuda --reps 3 \
        --log debug -o "$M" 2>&1 | grep -i "stages" | tail -1
      HYBRID_SSM_CHUNK_CB_BF16=$w timeout 100 $OPS perf -b cuda -o ssm_chunk_scan:perf 2>&1 |
        grep "^ssm" | cut -c1-125
    done
  done
fi
if section sanitizers; then
  # One op per run (the GDN / SSM ops together took more than 100 s under memcheck), the GDN and
  # SSM kernels first (memcheck, then racecheck), the others after; SAN_BUDGET seconds in all (each
  # run gets what is left, at most its own limit) so that the call ends inside the device's limit.
  san_end=$(($(date +%s) + ${SAN_BUDGET:-480}))
  san() {
    local tool=$1 op=$2 limit=$3 left=$((san_end - $(date +%s)))
    ((left < limit)) && limit=$left
    if ((limit < 10)); then echo "$tool $op: not run (sanitizer budget spent)"; return; fi
    timeout "$limit" stdbuf -oL compute-sanitizer --tool "$tool" --error-exitcode 3 $OPS test -b cuda -v -o "$op" \
      > "$OUT/${tool}_$op.txt" 2>&1
    echo "$tool $op: rc $? ($(grep -cE '^  OK' "$OUT/${tool}_$op.txt") cases OK)" \
      "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/${tool}_$op.txt" | tail -1)"
  }
  # The new kernel first (cuda_fa2c's pair barriers and P / row-max exchange): at the end of the
  # list the budget is likely spent before them (the GDN / SSM runs may take 1410 s, SAN_BUDGET 480).
  # SAN_LIST ("tool:op:limit ..." ) replaces the list.
  if [ -n "${SAN_LIST:-}" ]; then
    for t in $SAN_LIST; do IFS=: read -r tool op limit <<< "$t"; san "$tool" "$op" "$limit"; done
    SAN_LIST_ONLY=1
  fi
  if [ -z "${SAN_LIST_ONLY:-}" ]; then
  # attn_prefill: the own kernels (the cuDNN variant is opt-in: HYBRID_ATTN_PREFILL_CUDNN=1 in the
  # environment with SAN_LIST=memcheck:attn_prefill:60 checks it and its table-copy kernel).
  san memcheck attn_prefill 60
  san racecheck attn_prefill 90
  for op in gdn_chunk_prefill ssm_chunk_scan gdn_recurrent ssm_step gdn_prep_step gdn_record \
      gdn_replay ssm_step_record ssm_replay; do san memcheck "$op" 90; done
  for op in gdn_chunk_prefill ssm_chunk_scan gdn_recurrent ssm_step gdn_prep_step; do
    san racecheck "$op" 120
  done
  for op in attn_decode linear_q; do san memcheck "$op" 60; done
  fi
fi
echo "[t+$(($(date +%s) - start))s] == done"
# The device tool brings back at most 8 files: every log in one archive beside final.log.
(cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz --exclude=final.log -- *.txt 2>/dev/null &&
  rm -f -- *.txt)
