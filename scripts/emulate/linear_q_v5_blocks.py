# Run: python3 scripts/emulate/linear_q_v5_blocks.py (numpy; no GPU). Keep in step with the kernel.
# Lane-level emulation of linear_q_gemv_v5_kernel + launch_gemv_v5 (src/cuda/quant.cu), mirroring
# its index arithmetic: the parts choice and the grid, tile groups per CTA round, the loader's
# pointers (codes: uint2 index 4·j + c of rows g / g + 8, advanced by 16 per step, loads at
# negative offsets; the lane's scale word: scales / biases of row g / g + 8 by c), the L2
# prefetch address (checked inside the part's range of the row), the two staging passes (per-token
# exponent, f16 pairs (x0,x4), (x1,x5)/16, (x2,x6), (x3,x7)/16, the xx layout [group][24]), the
# m16n8k16 fragments (A rows g / g + 8, k slots 2c, 2c+1, 2c+8, 2c+9; B column g; C/D), the quad's
# scale shuffles, and both epilogues, against y = x · dequant(W)ᵀ (+ bias) in f64.
import numpy as np

WARPS, BATCH, PREFETCH = 8, 4, 2  # kV5Warps, kV5Batch, kV5PrefetchSteps
rng = np.random.default_rng(5)


def bf16_bits(x):  # f32 -> bf16 bits, round to nearest even
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_val(b):
    return (np.asarray(b, np.uint32) << 16).view(np.float32)


def f16_bits(x):
    return np.asarray(x, np.float32).astype(np.float16).view(np.uint16)


def f16_val(b):
    return np.asarray(b, np.uint16).view(np.float16).astype(np.float32)


def half16_to_f32(word, hi, bf):
    h = (word >> 16) & 0xFFFF if hi else word & 0xFFFF
    return float(bf16_val(np.uint16(h))) if bf else float(f16_val(np.uint16(h)))


def pair_f16(u32):  # a u32 of two f16 -> (lo, hi) as float
    return float(f16_val(np.uint16(u32 & 0xFFFF))), float(f16_val(np.uint16(u32 >> 16)))


def and_or(a, mask, b):
    return (a & mask) | b


def run(T, inn, out, gs, x_bf16, s_bf16, bias, x_scale=1.0, sms=132, w_pad=0, s_pad=0):
    # Inputs as the kernel sees them.
    xf = (rng.standard_normal((T, inn)) * x_scale).astype(np.float32)
    xb = bf16_bits(xf) if x_bf16 else f16_bits(xf)
    xv = bf16_val(xb) if x_bf16 else f16_val(xb)
    codes = rng.integers(0, 16, (out, inn))
    w_stride = inn // 8 + w_pad
    words = np.zeros((out, w_stride), np.uint64)
    for k in range(8):
        words[:, : inn // 8] |= codes[:, k::8].astype(np.uint64) << (4 * k)
    words = words.astype(np.uint32)
    groups_n = inn // gs
    s_stride = groups_n + s_pad
    sc = (rng.standard_normal((out, groups_n)) * 0.02).astype(np.float32)
    bi = (rng.standard_normal((out, groups_n)) * 0.1).astype(np.float32)
    enc = bf16_bits if s_bf16 else f16_bits
    dec = bf16_val if s_bf16 else f16_val
    sb = np.zeros((out, s_stride), np.uint16); sb[:, :groups_n] = enc(sc)
    bb = np.zeros((out, s_stride), np.uint16); bb[:, :groups_n] = enc(bi)
    biasv = (rng.standard_normal(out) * 0.5).astype(np.float32) if bias else None
    # Reference (f64).
    W = dec(sb[:, :groups_n]).astype(np.float64).repeat(gs, 1) * codes + dec(bb[:, :groups_n]).astype(np.float64).repeat(gs, 1)
    ref = xv.astype(np.float64) @ W.T
    if bias: ref += biasv
    # supports()
    assert inn % 256 == 0 and gs in (64, 128) and T <= 8
    step_values = 4 if gs == 64 else 2
    assert s_stride % step_values == 0
    # launch_gemv_v5
    KGS = gs // 64
    per_sm = 3  # __launch_bounds__(256, 3), small staged x
    tiles, spans = (out + 15) // 16, inn // 64
    resident = sms * per_sm * WARPS
    parts = 1
    while parts < WARPS and tiles * parts < resident and spans % (BATCH * 2 * parts) == 0:
        parts *= 2
    tpg = WARPS // parts
    tgroups = (tiles + tpg - 1) // tpg
    grid = min(tgroups, sms * per_sm)
    nb = inn // 64 // (BATCH * parts)
    assert nb >= 1
    # Kernel: staging (per CTA; identical for all CTAs).
    words8, rs = inn // 8, inn // 8 + 1
    xs = np.zeros((T, rs, 4), np.uint32)
    xx = np.zeros((groups_n, 24), np.float32)
    xmax = np.zeros(8, np.int64)
    for t in range(T):
        m = np.float32(np.max(np.abs(xv[t])))
        xmax[t] = int(np.array(m, np.float32).view(np.int32))
    def token_exp(t):
        b = int(xmax[t])
        e = 0 if b == 0 else ((b >> 23) & 0xFF) - 127 - 14
        return max(-126, min(113, e))
    yscale = [2.0 ** token_exp(t) for t in range(8)]
    for n in range(T):
        down = np.float32(2.0 ** (-token_exp(n)))
        for g0 in range(0, words8, 8 * KGS):
            xsum = np.float32(0); hsum = np.float32(0)
            for wi in range(g0, g0 + 8 * KGS):
                v = xv[n, 8 * wi: 8 * wi + 8]
                for m in range(4):
                    f = down * np.float32(0.0625) if m % 2 else down
                    lo = np.float16(v[m] * f); hi = np.float16(v[m + 4] * f)
                    lo_f, hi_f = np.float32(lo), np.float32(hi)
                    hsum += lo_f + hi_f
                    xsum += np.float32(16) * (lo_f + hi_f) if m % 2 else lo_f + hi_f
                    xs[n, wi, m] = int(lo.view(np.uint16)) | (int(hi.view(np.uint16)) << 16)
            q = g0 // (8 * KGS)
            xx[q, (n // 2) * 4 + n % 2] = -1024 * hsum
            xx[q, (n // 2) * 4 + n % 2 + 2] = -1024 * hsum
            xx[q, 16 + n] = xsum
    y = np.full((T, out), np.nan)
    written = np.zeros((T, out), int)
    words_flat, sflat, bflat = words.reshape(-1), sb.reshape(-1), bb.reshape(-1)
    for cta in range(grid):
        partial = np.full((WARPS, 16, 8), np.nan)
        # Per warp state; warps of a CTA advance in lockstep (the loop is CTA-uniform).
        st = []
        for warp in range(WARPS):
            part, slot = warp % parts, warp // parts
            j_first = part * nb * BATCH
            lanes = []
            for lane in range(32):
                g, c = lane // 4, lane % 4
                lanes.append(dict(g=g, c=c))
            st.append(dict(part=part, slot=slot, j_first=j_first, lanes=lanes,
                           acc=np.zeros((32, 4)), buf=[None, None]))
        def l_set(w, tg):
            s = st[w]
            for L in s["lanes"]:
                g, c = L["g"], L["c"]
                o0 = (tg * tpg + s["slot"]) * 16
                ra = o0 + g if o0 + g < out else out - 1
                rb = o0 + g + 8 if o0 + g + 8 < out else out - 1
                L["pa"] = (ra * w_stride) // 2 + 4 * s["j_first"] + c   # uint2 index into words
                L["pb"] = (rb * w_stride) // 2 + 4 * s["j_first"] + c
                assert (ra * w_stride) % 2 == 0
                rc = rb if c & 2 else ra
                base = (rc * s_stride, "b" if c & 1 else "s")
                L["ps"] = ((base[0] + s["j_first"] // KGS) // step_values, base[1])
                assert (base[0] + s["j_first"] // KGS) % step_values == 0
                L["row_lo"] = (ra * w_stride, rb * w_stride)
        def l_load(w, prefetch):
            s = st[w]; buf = []
            for L in s["lanes"]:
                L["pa"] += 4 * BATCH; L["pb"] += 4 * BATCH
                L["ps"] = (L["ps"][0] + 1, L["ps"][1])
                na = [(int(words_flat[2 * (L["pa"] + 4 * (k - BATCH))]), int(words_flat[2 * (L["pa"] + 4 * (k - BATCH)) + 1])) for k in range(BATCH)]
                nbw = [(int(words_flat[2 * (L["pb"] + 4 * (k - BATCH))]), int(words_flat[2 * (L["pb"] + 4 * (k - BATCH)) + 1])) for k in range(BATCH)]
                arr = bflat if L["ps"][1] == "b" else sflat
                i0 = (L["ps"][0] - 1) * step_values
                vals = arr[i0: i0 + step_values].astype(np.uint32)
                sw = [int(vals[0]) | (int(vals[1]) << 16)]
                if step_values == 4: sw.append(int(vals[2]) | (int(vals[3]) << 16))
                buf.append((na, nbw, sw))
                if prefetch:
                    c = L["c"]
                    base_uint2 = L["pb"] if c & 1 else L["pa"]
                    byte = base_uint2 * 8 + (4 * BATCH * (PREFETCH - 1) - c) * 8 + (32 * BATCH - 1 if c & 2 else 0)
                    row0 = L["row_lo"][c & 1] * 4
                    lo = row0 + s["j_first"] * 32; hi = row0 + (s["j_first"] + nb * BATCH) * 32
                    assert lo <= byte < hi, ("prefetch outside the part's range", byte, lo, hi)
            return buf
        def step_math(w, buf, step):
            s = st[w]
            j0 = s["j_first"] + step * BATCH
            for q in range(BATCH // KGS):
                gq = j0 // KGS + q
                A = np.zeros((16, 16)); B = np.zeros((16, 8))
                D = np.zeros((16, 8))
                for L_i, L in enumerate(s["lanes"]):  # C from xx
                    g, c = L["g"], L["c"]
                    cq = xx[gq, 4 * c: 4 * c + 4]
                    D[g, 2 * c], D[g, 2 * c + 1], D[g + 8, 2 * c], D[g + 8, 2 * c + 1] = cq
                for h in range(KGS):
                    k = q * KGS + h
                    for wsel in range(2):
                        for half in range(2):
                            for L_i, L in enumerate(s["lanes"]):
                                g, c = L["g"], L["c"]
                                na, nbw, _ = buf[L_i]
                                ua, ub = na[k][wsel], nbw[k][wsel]
                                tok = g if g < T else 0
                                xv4 = xs[tok, 8 * (j0 + k) + 2 * c + wsel]
                                if half == 0:
                                    a = [and_or(ua, 0x000F000F, 0x64006400), and_or(ub, 0x000F000F, 0x64006400),
                                         and_or(ua, 0x00F000F0, 0x64006400), and_or(ub, 0x00F000F0, 0x64006400)]
                                    b0, b1 = int(xv4[0]), int(xv4[1])
                                else:
                                    ua8, ub8 = ua >> 8, ub >> 8
                                    a = [and_or(ua8, 0x000F000F, 0x64006400), and_or(ub8, 0x000F000F, 0x64006400),
                                         and_or(ua8, 0x00F000F0, 0x64006400), and_or(ub8, 0x00F000F0, 0x64006400)]
                                    b0, b1 = int(xv4[2]), int(xv4[3])
                                A[g, 2 * c: 2 * c + 2] = pair_f16(a[0]); A[g + 8, 2 * c: 2 * c + 2] = pair_f16(a[1])
                                A[g, 2 * c + 8: 2 * c + 10] = pair_f16(a[2]); A[g + 8, 2 * c + 8: 2 * c + 10] = pair_f16(a[3])
                                B[2 * c: 2 * c + 2, g] = pair_f16(b0); B[2 * c + 8: 2 * c + 10, g] = pair_f16(b1)
                            D = D + A @ B
                for L_i, L in enumerate(s["lanes"]):
                    g, c = L["g"], L["c"]
                    quad0 = 4 * g
                    mw = [buf[quad0 + i][2][q // 2 if step_values == 4 else 0] for i in range(4)]
                    s_a = half16_to_f32(mw[0], q % 2, s_bf16); b_a = half16_to_f32(mw[1], q % 2, s_bf16)
                    s_b = half16_to_f32(mw[2], q % 2, s_bf16); b_b = half16_to_f32(mw[3], q % 2, s_bf16)
                    X = xx[gq, 16 + 2 * c: 16 + 2 * c + 2]
                    acc = s["acc"][L_i]
                    acc[0] += s_a * D[g, 2 * c] + b_a * X[0]
                    acc[1] += s_a * D[g, 2 * c + 1] + b_a * X[1]
                    acc[2] += s_b * D[g + 8, 2 * c] + b_b * X[0]
                    acc[3] += s_b * D[g + 8, 2 * c + 1] + b_b * X[1]
        # The kernel's loop.
        if cta < tgroups:
            for w in range(WARPS):
                l_set(w, cta); st[w]["buf"][0] = l_load(w, PREFETCH < nb)
        step, group_c, cur = 0, cta, 0
        while group_c < tgroups:
            for w in range(WARPS):  # load_ahead
                if step + 1 < nb:
                    st[w]["buf"][1 - cur] = l_load(w, step + 1 + PREFETCH < nb)
                elif group_c + grid < tgroups:
                    l_set(w, group_c + grid); st[w]["buf"][1 - cur] = l_load(w, PREFETCH < nb)
            for w in range(WARPS):
                step_math(w, st[w]["buf"][cur], step)
            cur = 1 - cur
            step += 1
            if step < nb: continue
            step = 0
            og = group_c * tpg * 16
            group_c += grid
            if parts == 1:
                for w in range(WARPS):
                    o0 = og + st[w]["slot"] * 16
                    for L_i, L in enumerate(st[w]["lanes"]):
                        g, c = L["g"], L["c"]
                        for r in range(2):
                            for u in range(2):
                                t, o = 2 * c + u, o0 + g + 8 * r
                                if t < T and o < out:
                                    v = yscale[t] * st[w]["acc"][L_i][2 * r + u]
                                    if bias: v += biasv[o]
                                    y[t, o] = v; written[t, o] += 1
            else:
                for w in range(WARPS):
                    for L_i, L in enumerate(st[w]["lanes"]):
                        g, c = L["g"], L["c"]
                        a = st[w]["acc"][L_i]
                        partial[w, g, 2 * c], partial[w, g, 2 * c + 1] = a[0], a[1]
                        partial[w, g + 8, 2 * c], partial[w, g + 8, 2 * c + 1] = a[2], a[3]
                for v in range(tpg * 128):
                    sl, t, row = v // 128, (v // 16) % 8, v % 16
                    o = og + sl * 16 + row
                    if t < T and o < out:
                        sm = sum(partial[sl * parts + q, row, t] for q in range(parts))
                        sm *= yscale[t]
                        if bias: sm += biasv[o]
                        y[t, o] = sm; written[t, o] += 1
            for w in range(WARPS):
                st[w]["acc"][:] = 0
    assert (written == 1).all(), "every output written exactly once"
    nmse = np.sum((y - ref) ** 2) / np.sum(ref ** 2)
    return nmse, parts, nb, grid, tgroups


if __name__ == "__main__":
    cases = [  # T, in, out, gs, x_bf16, s_bf16, bias, x_scale, sms, w_pad, s_pad
        (1, 256, 40, 64, True, True, False, 1.0, 132, 0, 0),
        (3, 512, 33, 128, False, False, True, 1.0, 132, 0, 0),
        (2, 1024, 200, 128, True, False, True, 1.0, 1, 2, 2),   # parts 1, rounds, prefetch
        (1, 2048, 100, 64, True, True, False, 1.0, 1, 0, 4),    # parts 1, nb 8
        (1, 1024, 600, 64, True, True, True, 1.0, 1, 2, 4),     # parts 1, 3 rounds, nb 4
        (1, 2048, 800, 64, True, True, False, 1.0, 1, 0, 0),    # parts 1, 3 rounds, nb 8
        (2, 2048, 300, 128, False, True, False, 1.0, 1, 0, 0),  # parts 1, 2 rounds, nb 8, tail
        (4, 1536, 70, 64, True, True, True, 1.0, 132, 0, 0),    # parts 2
        (3, 1024, 300, 128, True, True, False, 1.0, 132, 0, 0), # parts 4
        (7, 768, 37, 64, False, False, True, 1.0, 132, 0, 0),
        (8, 512, 20, 128, True, False, False, 1.0, 132, 0, 0),
        (2, 512, 24, 64, True, True, False, 3.0e5, 132, 0, 0),
        (1, 512, 24, 128, True, True, False, 1.0e-7, 132, 0, 0),
    ]
    for cs in cases:
        nmse, parts, nb, grid, tg = run(*cs)
        print(f"T={cs[0]} in={cs[1]} out={cs[2]} gs={cs[3]} sms={cs[8]}: parts {parts} nb {nb} grid {grid} "
              f"tile groups {tg}: nmse {nmse:.2e}")
        assert nmse < 1e-10, nmse
    print("all cases match")
