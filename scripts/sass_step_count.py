#!/usr/bin/env python3
"""Counts the SASS instructions of one pipeline step of a GEMV-style kernel along its common path,
by opcode class: from the loop head (the target of the kernel's last backward branch), taking the
first conditional branch met (the "more steps in this tile" test of linear_q.gemv_v5's loader)
and falling through the rest, up to the first conditional branch after `hmma` HMMAs (the
tile-end test).

    cuobjdump -sass build/CMakeFiles/hybrid.dir/src/cuda/quant.cu.o > /tmp/quant.sass
    python3 scripts/sass_step_count.py /tmp/quant.sass gemv_v5_kernelILi1ELb1 16

(ILi1ELb1: groups of 64, bf16 scales; ILi2ELb1: groups of 128; 16 HMMAs per 4-span step.)
"""
import collections
import re
import sys


def main():
    path, func, hmma = sys.argv[1], sys.argv[2], int(sys.argv[3])
    funcs = open(path).read().split("Function : ")
    body = [f for f in funcs if func in f.split("\n")[0]][0]
    ins = []
    for line in body.split("\n"):
        m = re.search(r"/\*([0-9a-f]{4,5})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    at = {a: k for k, (a, _) in enumerate(ins)}

    def target(s):
        m = re.search(r"BRA (0x[0-9a-f]+)", s)
        return int(m.group(1), 16) if m else None

    head = [target(s) for a, s in ins if target(s) is not None and target(s) < a][-1]
    k, followed, seen_hmma, n = at[head], False, 0, 0
    counts = collections.Counter()
    while True:
        _, s = ins[k]
        op = re.sub(r"^@!?P\w+\s+", "", s).split()[0]
        counts[op if op.startswith("HMMA") else op.split(".")[0]] += 1
        n += 1
        seen_hmma += op.startswith("HMMA")
        t = target(s)
        if t is not None:
            if not followed:
                followed = True
                k = at[t]
                continue
            if seen_hmma >= hmma:
                break
            if not s.startswith("@"):
                k = at[t]
                continue
        k += 1
    print(f"{func}: loop head {head:#x}, {n} instructions per step")
    for op, c in counts.most_common():
        print(f"  {op:24s} {c}")


if __name__ == "__main__":
    main()
