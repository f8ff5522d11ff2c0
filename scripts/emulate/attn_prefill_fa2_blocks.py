# Run: python3 scripts/emulate/attn_prefill_fa2_blocks.py (numpy; no GPU). Keep in step with the kernel.
# Block-level emulation of plan_tiles_kernel + prefill_fa2_kernel (src/cuda/attention_prefill.cu,
# attn_prefill.cuda_fa2), mirroring its index arithmetic: the tile list (128-row tiles, last
# first), the grid (x = head, y = tile), the loader's row / step / lookup-lane mapping with one
# lookup per row for K and V, the two stages (tile i in stage i % 2, tile i + 1 issued after the
# barrier of tile i: a stage is never overwritten while a warp may still read it), the per-warp
# skip of tiles no row reaches and the per-warp `full` test that drops the masks, against a
# direct causal / windowed softmax over the paged cache.
# FA2B=1: prefill_fa2b_kernel (attn_prefill.cuda_fa2b): the same block logic with 64-key tiles at
# D 256 (its loader: warp w copies row w + 8·it in step it, lane = chunk; lookup lane i takes row
# w + 8·i), plus the two cases added for it.
import numpy as np, math, os

FA2B = os.environ.get("FA2B") == "1"

BM2, WARPS, THREADS = 128, 8, 256
np.seterr(invalid="ignore")  # np.where evaluates both branches (−inf − −inf in the unused one)


def BN_of(D):
    return 32 if D == 256 and not FA2B else 64


def locate(table, n, pos, page, num_pages):
    col = pos // page
    if pos < 0 or col >= table.shape[1]: return (-1, 0)
    pg = table[n, col]
    if pg < 0 or pg >= num_pages: return (-1, 0)
    return (pg, pos - col * page)


def plan_tiles(cu, T):
    N = len(cu) - 1
    max_tiles = T // BM2 + N
    tiles = []
    for n in range(N):
        L = cu[n + 1] - cu[n]
        r0 = 0
        while r0 < L and len(tiles) < max_tiles:
            tiles.append((n, r0)); r0 += BM2
    assert sum((cu[n + 1] - cu[n] + BM2 - 1) // BM2 for n in range(N)) <= max_tiles
    tiles += [(-1, 0)] * (max_tiles - len(tiles))
    return tiles, max_tiles


def loader_rows(D):
    """(warp, lane, step) -> row copied, and lookup lane i -> row looked up: they must agree."""
    CH = D // 8; BN = BN_of(D); RPI = 32 // CH; STEPS = BN * CH // THREADS
    assert STEPS * RPI == BN // WARPS and BN // WARPS <= 32
    covered = np.zeros((BN, CH), int)
    for warp in range(WARPS):
        looked = {}
        for lane in range(BN // WARPS):
            r = (warp * 32 + (lane // RPI) * THREADS) // CH + lane % RPI
            looked[lane] = r
        for it in range(STEPS):
            for lane in range(32):
                tid = warp * 32 + lane
                c = tid + it * THREADS
                r, ch = c // CH, c % CH
                assert looked[it * RPI + lane // CH] == r, "offset of another row"
                covered[r, ch] += 1
    assert (covered == 1).all(), "every chunk of the tile exactly once"


def run(q, kc, vc, table, cu, seq_lens, window, scale):
    T, Hq, D = q.shape
    num_pages, page, Hkv, _ = kc.shape
    group = Hq // Hkv
    BN = BN_of(D)
    sl2 = scale * math.log2(math.e)
    tiles, max_tiles = plan_tiles(cu, T)
    out = np.full((T, Hq, D), np.nan)
    for by in range(max_tiles):
        for h in range(Hq):
            n, r0 = tiles[max_tiles - 1 - by]
            if n < 0: continue
            hk = h // group
            L = cu[n + 1] - cu[n]
            rows = min(BM2, L - r0)
            prefix = seq_lens[n] - L
            pos0 = prefix + r0; pos_last = pos0 + rows - 1; t0 = cu[n] + r0
            if pos0 < 0:
                out[t0:t0 + rows, h] = 0; continue
            lo_first = max(0, pos0 - window + 1) if window > 0 else 0
            j_begin = lo_first // BN * BN
            Q = np.zeros((BM2, D)); Q[:rows] = q[t0:t0 + rows, h]
            stK = np.full((2, BN, D), np.nan); stV = stK.copy()
            busy = [False, False]  # stage written and not yet retired by a barrier

            def load_kv(st, j0):
                for r in range(BN):
                    j = j0 + r
                    kv = locate(table, n, j, page, num_pages) if j <= pos_last else (-1, 0)
                    ok = kv[0] >= 0
                    stK[st, r] = kc[kv[0], kv[1], hk] if ok else 0
                    stV[st, r] = vc[kv[0], kv[1], hk] if ok else 0

            load_kv(0, j_begin)
            m = np.full((WARPS, 16), -np.inf); l = np.zeros((WARPS, 16)); O = np.zeros((WARPS, 16, D))
            row_pos = np.array([[pos0 + w * 16 + i if w * 16 + i < rows else -1 for i in range(16)]
                                for w in range(WARPS)])
            row_lo = np.where(row_pos >= 0, np.maximum(0, row_pos - window + 1), 0) if window > 0 \
                else np.zeros_like(row_pos)
            st = 0; j0 = j_begin
            while j0 <= pos_last:
                # barrier: every warp is past tile j0 − BN, whose stage (st ^ 1) becomes free
                if j0 + BN <= pos_last: load_kv(st ^ 1, j0 + BN)
                for w in range(WARPS):
                    w_rows = min(16, rows - w * 16)
                    w_first = pos0 + w * 16; w_last = w_first + w_rows - 1
                    w_lo_first = max(0, w_first - window + 1) if window > 0 else 0
                    w_lo_last = max(0, w_last - window + 1) if window > 0 else 0
                    keys = np.arange(j0, j0 + BN)
                    mask = (keys[None, :] <= row_pos[w][:, None]) & (keys[None, :] >= row_lo[w][:, None])
                    if w_rows <= 0 or j0 > w_last or j0 + BN - 1 < w_lo_first:
                        assert not mask.any(), "skipped a tile a row reaches"
                        continue
                    full = j0 + BN - 1 <= w_first and j0 >= w_lo_last and w_rows == 16
                    if full: assert mask.all(), "full tile with a masked key"
                    s = Q[w * 16:w * 16 + 16] @ stK[st].T * sl2
                    if not full: s = np.where(mask, s, -np.inf)
                    mx = s.max(axis=1)
                    m_new = np.maximum(m[w], mx)
                    corr = np.where(m_new == -np.inf, 1.0, np.exp2(m[w] - m_new))
                    base = np.where(m_new == -np.inf, 0.0, m_new)
                    p = np.exp2(s - base[:, None])
                    l[w] = l[w] * corr + p.sum(axis=1)
                    m[w] = m_new
                    O[w] = O[w] * corr[:, None] + p @ stV[st]
                j0 += BN; st ^= 1
            for w in range(WARPS):
                for i in range(16):
                    r = w * 16 + i
                    if r >= rows: continue
                    out[t0 + r, h] = O[w, i] / l[w, i] if l[w, i] > 0 else 0
    return out


def reference(q, kc, vc, table, cu, seq_lens, window, scale):
    T, Hq, D = q.shape; page = kc.shape[1]; Hkv = kc.shape[2]; group = Hq // Hkv
    out = np.zeros_like(q)
    for n in range(len(cu) - 1):
        L = cu[n + 1] - cu[n]
        for i in range(L):
            pos = seq_lens[n] - L + i
            lo = max(0, pos - window + 1) if window > 0 else 0
            for h in range(Hq):
                hk = h // group
                K = np.array([kc[table[n, j // page], j % page, hk] for j in range(lo, pos + 1)])
                V = np.array([vc[table[n, j // page], j % page, hk] for j in range(lo, pos + 1)])
                s = K @ q[cu[n] + i, h] * scale; p = np.exp(s - s.max())
                out[cu[n] + i, h] = p @ V / p.sum()
    return out


def case(lens, news, Hq, Hkv, D, page, window=0, scale=None, seed=0):
    rng = np.random.default_rng(seed)
    N = len(lens); max_len = max(lens)
    Sz = page if page else max_len + 5
    max_pages = (max_len + Sz - 1) // Sz + 1 if page else 1
    used = sum((L + Sz - 1) // Sz for L in lens); num_pages = used + 3
    ids = rng.permutation(num_pages)
    table = -np.ones((N, max_pages), int); nxt = 0
    for n, L in enumerate(lens):
        first = max(0, L - news[n] - window + 1) if window > 0 else 0
        for j in range((L + Sz - 1) // Sz):
            pg = ids[nxt]; nxt += 1
            if (j + 1) * Sz > first: table[n, j] = pg
    kc = rng.standard_normal((num_pages, Sz, Hkv, D)); vc = rng.standard_normal((num_pages, Sz, Hkv, D))
    cu = [0]
    for x in news: cu.append(cu[-1] + x)
    T = cu[-1]
    q = rng.standard_normal((T, Hq, D))
    sc = scale if scale else 1 / math.sqrt(D)
    got = run(q, kc, vc, table, cu, lens, window, sc)
    ref = reference(q, kc, vc, table, cu, lens, window, sc)
    err = np.abs(got - ref).max() if T else 0.0
    print(f"lens={lens} new={news} Hq={Hq} Hkv={Hkv} D={D} page={page} window={window} max|err|={err:.2e}")
    assert err < 1e-9, "mismatch"


for D in (64, 128, 256):
    loader_rows(D)
print("loader mapping: every chunk once, offsets from the lane that looked the row up")
# The attn_prefill cases of tests/ops/attention_cases.cpp (heads reduced where they only repeat).
case([3, 165], [3, 65], 2, 1, 256, 16)
case([40, 7], [33, 7], 2, 1, 256, 16)
case([1, 68, 263, 50], [1, 63, 65, 0], 4, 2, 128, 16)
case([1, 68, 263, 50], [1, 63, 65, 0], 4, 2, 128, 16, window=64)
case([257, 20], [257, 3], 2, 1, 128, 16, window=100)
case([90, 65], [7, 65], 2, 2, 64, 0, scale=0.05)
case([128, 3], [128, 1], 2, 2, 128, 0, window=5)
case([300, 70], [130, 70], 2, 2, 64, 16, window=50)
case([260], [130], 4, 1, 256, 64)
# Several 128-row tiles, a cached prefix, windows cutting the middle of warps and of tiles.
case([700], [400], 2, 1, 256, 64, window=77)
case([1029, 5], [300, 5], 2, 1, 64, 16, window=200)
case([513], [513], 1, 1, 128, 7)
if FA2B:
    case([713], [540], 8, 1, 256, 16)
    case([900, 65], [500, 65], 2, 2, 256, 32, window=130)
    case([300, 0, 129], [300, 0, 128], 2, 2, 256, 16)
print("all emulated cases match")
