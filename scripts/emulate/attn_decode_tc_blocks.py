# Run: python3 scripts/emulate/attn_decode_tc_blocks.py (numpy; no GPU). Keep in step with the kernel.
# Block-level emulation of decode_tc_kernel + attn_merge_kernel (src/cuda/attention.cu), mirroring
# its index arithmetic (splits, tiles, stages, key flags, per-warp online softmax, warp merge,
# partial layout, merge skipping empty splits) against a direct softmax reference.
import numpy as np, math
BN, S_STAGES, ROWS, WARPS = 64, 3, 16, 4  # kTcBN, kTcStages, kTcRows, kTcWarps
WIDE_MERGE = False  # True: attn_merge_wide_kernel (attn_decode.cuda_tc2); the cases run both

def locate(table, n, pos, page, num_pages):
    col = pos // page
    if pos < 0 or col >= table.shape[1]: return (-1, 0)
    pg = table[n, col]
    if pg < 0 or pg >= num_pages: return (-1, 0)
    return (pg, pos - col * page)

def plan(rows, Hkv, group, D, cap, window, sms=132):
    hchunks = (group + ROWS - 1) // ROWS
    keys_max = cap if window <= 0 else min(cap, window)
    blocks = max(1, rows * Hkv * hchunks)
    per_sm = 1 if D == 256 else (2 if D == 128 else 4)
    resident = sms * per_sm
    s_max = min(max(keys_max // 64, 1), 256)
    best, splits = None, 1
    for s in range(1, s_max + 1):
        waves = (blocks * s + resident - 1) // resident
        cost = waves * (keys_max / s + 64.0)
        if s == 1 or cost < best: best, splits = cost, s
    return hchunks, splits

def run(q, kc, vc, table, seq_lens, window, scale, splits_override=None):
    N, Hq, D = q.shape
    num_pages, page, Hkv, _ = kc.shape
    group = Hq // Hkv
    hchunks, splits = plan(N, Hkv, group, D, page * table.shape[1], window)
    if splits_override: splits = splits_override
    sl2 = scale * math.log2(math.e)
    out = np.full((N, Hq, D), np.nan)
    part_o = np.full((N, Hq, splits, D), np.nan)   # unwritten = NaN (must never be read)
    part_ml = np.full((N, Hq, splits, 2), np.nan)
    for n in range(N):
        for y in range(Hkv * hchunks):
            hk, hc = y // hchunks, y % hchunks
            h0 = hk * group + hc * ROWS
            gc = min(ROWS, group - hc * ROWS)
            for split in range(splits):
                pos = seq_lens[n] - 1
                lo = max(0, pos - window + 1) if window > 0 else 0
                nkeys = pos - lo + 1 if pos >= 0 else 0
                chunk = ((nkeys + splits - 1) // splits + BN - 1) // BN * BN
                kb = lo + split * chunk
                ke = min(pos + 1, kb + chunk)
                ntiles = (ke - kb + BN - 1) // BN if ke > kb else 0
                if ntiles == 0:
                    for r in range(gc):
                        if splits == 1: out[n, h0 + r] = 0
                        else: part_ml[n, h0 + r, split] = (-np.inf, 0.0)
                    continue
                Q = np.zeros((ROWS, D)); Q[:gc] = q[n, h0:h0 + gc]
                stK = np.full((S_STAGES, BN, D), np.nan); stV = stK.copy()
                ok_s = np.zeros((S_STAGES, BN), bool)
                def load_tile(i):
                    j0 = kb + i * BN
                    for r in range(BN):
                        j = j0 + r
                        kv = locate(table, n, j, page, num_pages) if j < ke else (-1, 0)
                        ok = kv[0] >= 0
                        stK[i % S_STAGES, r] = kc[kv[0], kv[1], hk] if ok else 0
                        stV[i % S_STAGES, r] = vc[kv[0], kv[1], hk] if ok else 0
                        ok_s[i % S_STAGES, r] = ok
                for i in range(S_STAGES - 1):
                    if i < ntiles: load_tile(i)
                m = np.full((WARPS, ROWS), -np.inf); l = np.zeros((WARPS, ROWS)); O = np.zeros((WARPS, ROWS, D))
                for i in range(ntiles):
                    if i + S_STAGES - 1 < ntiles: load_tile(i + S_STAGES - 1)
                    st = i % S_STAGES
                    for w in range(WARPS):
                        keys = slice(w * 16, w * 16 + 16)
                        s = Q @ stK[st, keys].T
                        s = np.where(ok_s[st, keys][None, :], s * sl2, -np.inf)
                        mx = s.max(axis=1)
                        m_new = np.maximum(m[w], mx)
                        corr = np.where(m_new == -np.inf, 1.0, np.exp2(m[w] - m_new))
                        base = np.where(m_new == -np.inf, 0.0, m_new)
                        p = np.exp2(s - base[:, None])
                        l[w] = l[w] * corr + p.sum(axis=1)
                        m[w] = m_new
                        O[w] = O[w] * corr[:, None] + p @ stV[st, keys]
                for r in range(gc):
                    M = m[:, r].max()
                    wt = np.array([0.0 if m[w, r] == -np.inf else 2.0 ** (m[w, r] - M) for w in range(WARPS)])
                    L = (wt * l[:, r]).sum(); Ov = (wt[:, None] * O[:, r]).sum(axis=0)
                    if splits == 1: out[n, h0 + r] = Ov / L if L > 0 else 0
                    else:
                        part_o[n, h0 + r, split] = Ov; part_ml[n, h0 + r, split] = (M, L)
    if splits > 1 and WIDE_MERGE:
        # attn_merge_wide_kernel (cuda_tc2): thread t < splits holds split t's (m, l); column sums
        # by 8 lanes j over splits s = j (mod 8) with a select dropping weight-0 splits, then the
        # 8 partial sums added in order.
        for n in range(N):
            for h in range(Hq):
                ml_ = part_ml[n, h]
                assert not np.isnan(ml_[:, 0]).any(), "unwritten m"
                M = ml_[:, 0].max()
                w = np.array([0.0 if x == -np.inf else 2.0 ** (x - M) for x in ml_[:, 0]])
                L = (w * ml_[:, 1]).sum()
                part = np.zeros((8, D))
                for j in range(8):
                    for s_ in range(j, splits, 8):
                        if w[s_] != 0:  # the kernel's select: a weight-0 split's o_s is never used
                            assert not np.isnan(part_o[n, h, s_]).any(), "unwritten o of a used split"
                            part[j] += w[s_] * part_o[n, h, s_]
                tot = part.sum(axis=0)
                out[n, h] = tot / L if L > 0 else 0
    elif splits > 1:
        for n in range(N):
            for h in range(Hq):
                ms = part_ml[n, h, :, 0]
                assert not np.isnan(ms).any(), "unwritten m"
                M = ms.max()
                w = np.array([0.0 if x == -np.inf else 2.0 ** (x - M) for x in ms])
                L = (w * part_ml[n, h, :, 1]).sum()
                O = np.zeros(D)
                for s_ in range(splits):
                    if w[s_] != 0: O += w[s_] * part_o[n, h, s_]
                out[n, h] = O / L if L > 0 else 0
    return out, splits

def reference(q, kc, vc, table, seq_lens, window, scale):
    N, Hq, D = q.shape; page = kc.shape[1]; Hkv = kc.shape[2]; group = Hq // Hkv
    out = np.zeros_like(q)
    for n in range(N):
        pos = seq_lens[n] - 1
        if pos < 0: continue
        lo = max(0, pos - window + 1) if window > 0 else 0
        for h in range(Hq):
            hk = h // group
            K = np.array([kc[table[n, j // page], j % page, hk] for j in range(lo, pos + 1)])
            V = np.array([vc[table[n, j // page], j % page, hk] for j in range(lo, pos + 1)])
            s = K @ q[n, h] * scale; p = np.exp(s - s.max()); out[n, h] = p @ V / p.sum()
    return out

def case(lens, Hq, Hkv, D, page, window=0, scale=None, seed=0, splits_override=None):
    rng = np.random.default_rng(seed)
    N = len(lens); max_len = max(lens)
    Sz = page if page else max_len + 5
    max_pages = (max_len + Sz - 1) // Sz + 1 if page else 1
    used = sum((L + Sz - 1) // Sz for L in lens); num_pages = used + 3
    ids = rng.permutation(num_pages)
    table = -np.ones((N, max_pages), int); nxt = 0
    for n, L in enumerate(lens):
        first = max(0, L - 1 - window + 1) if window > 0 else 0
        for j in range((L + Sz - 1) // Sz):
            pg = ids[nxt]; nxt += 1
            if (j + 1) * Sz > first: table[n, j] = pg
    kc = rng.standard_normal((num_pages, Sz, Hkv, D)); vc = rng.standard_normal((num_pages, Sz, Hkv, D))
    q = rng.standard_normal((N, Hq, D))
    sc = scale if scale else 1 / math.sqrt(D)
    got, splits = run(q, kc, vc, table, lens, window, sc, splits_override)
    ref = reference(q, kc, vc, table, lens, window, sc)
    err = np.abs(got - ref).max()
    print(f"lens={lens} Hq={Hq} Hkv={Hkv} D={D} page={page} window={window} splits={splits} max|err|={err:.2e}")
    assert err < 1e-9, "mismatch"

def all_cases():
    case([4097, 3000, 1, 0, 65], 8, 1, 128, 16)
    case([3001, 64, 129], 16, 2, 64, 64, window=200)   # D 64 to keep it fast; splits as planned at D 256 differ
    case([2500, 7], 16, 2, 64, 16, window=40)
    case([1500, 200, 0], 32, 1, 64, 32)
    case([1000, 999], 2, 2, 64, 16)
    case([777, 2049, 5], 32, 8, 64, 16, window=300)
    case([129, 64, 0, 1], 4, 4, 64, 0, scale=0.3)
    case([1 + (n * 37) % 90 if n != 7 else 0 for n in range(40)], 32, 8, 64, 16)
    case([1029, 257, 1, 0], 16, 2, 64, 16)
    case([5000], 16, 2, 64, 16, splits_override=7)    # contexts not a multiple of the split
    case([130, 64, 65], 8, 1, 64, 16, splits_override=256)  # more splits than tiles: most empty
    case([300, 299], 8, 1, 64, 7, window=100, splits_override=3)  # odd page size, window mid-page
    case([9001], 16, 2, 64, 64)                     # B 1, one long sequence (cuda_tc2 cases)
    case([6003], 2, 2, 64, 16, window=4097)
    case([2500, 70, 0], 16, 2, 64, 16, splits_override=66)


for WIDE_MERGE in (False, True):
    print(f"merge: {'attn_merge_wide_kernel' if WIDE_MERGE else 'attn_merge_kernel'}")
    all_cases()
print("all emulated cases match")
