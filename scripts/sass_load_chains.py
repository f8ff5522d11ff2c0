#!/usr/bin/env python3
"""Lists the kernels whose global loads are waited for at once: an LDG whose destination register
is read by one of the next `window` instructions (default 2). Each such load is a memory round
trip the warp sits through before it can issue the next load, so a run of them in a prologue is
a chain of round trips (session 15: `load_any`'s dtype branch converts inside its arm, and
gdn_prep_step's 12 parameter loads were 12 round trips in a row, ssm_step's ~20; `raw_any` /
`float_of_raw` in dtype.cuh issue them together instead).

    cuobjdump -xelf all build/CMakeFiles/hybrid.dir/src/cuda/ssm.cu.o   # writes ssm.sm_90a.cubin
    cuobjdump -sass ssm.sm_90a.cubin > /tmp/ssm.sass    # needs nvdisasm on the PATH
    python3 scripts/sass_load_chains.py /tmp/ssm.sass [min_count] [window]

Prints `count  function` for the functions with at least min_count (default 6) such loads, most
first. A hit in a loop that streams through memory costs little (other warps hide it); a run of
hits before the first arithmetic of a latency-bound kernel (decode at batch 1) is what to fix.
"""
import re
import sys


def main():
    path = sys.argv[1]
    min_count = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    window = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    rows = []
    for body in open(path).read().split("Function : ")[1:]:
        name = body.split("\n")[0].strip()
        ins = re.findall(r"/\*[0-9a-f]{4,5}\*/\s+(.*?);", body)
        hits = 0
        for k, s in enumerate(ins):
            m = re.match(r"(@!?P\w+\s+)?LDG\S*\s+(R\d+)", s)
            if not m:
                continue
            reg = m.group(2)
            # The destination read (not overwritten) by one of the next instructions: it appears
            # after the first operand of an instruction (its sources), as a whole register name.
            for nxt in ins[k + 1 : k + 1 + window]:
                nxt = re.sub(r"^@!?P\w+\s+", "", nxt)  # the guard predicate
                operands = nxt.split(None, 1)[1] if " " in nxt else ""
                sources = operands.split(",", 1)[1] if "," in operands else ""
                if re.search(r"\b%s\b" % reg, sources):
                    hits += 1
                    break
        if hits >= min_count:
            rows.append((hits, name))
    for hits, name in sorted(rows, reverse=True):
        print(f"{hits:5d}  {name}")


if __name__ == "__main__":
    main()
