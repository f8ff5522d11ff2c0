# Run: python3 scripts/emulate/attn_prefill_fa2c_pairs.py (numpy; no GPU).
# Lane-level emulation of prefill_fa2c_kernel's block (attn_prefill.cuda_fa2c) in f64: the byte
# addresses of every ldmatrix (q_off, k_off, v_off, p_rd as the kernel computes them), the PTX
# fragment layouts of ldmatrix.m8n8.x4[.trans] and mma.m16n8k16 row.col, the P words written by
# p_w, the partial row maxima and sums exchanged between the two halves of a pair, the pair's skip
# and `full` (no mask) tile ranges, the masks, the scale folded into exp2's FMA, and the final
# normalisation; each block's rows against a direct softmax. The K/V loader is fa2b's (checked by
# attn_prefill_fa2_blocks.py); here the tiles are placed in the swizzled layout directly.
import numpy as np

D, BN, BM, CH = 256, 64, 128, 32
ROWB, PSTRIDE = 512, 72  # bytes per K/V/Q row; P row stride in bf16
PROWB = PSTRIDE * 2
INT_MIN = -(2**31)
lanes = np.arange(32)
g_, c4_ = lanes // 4, lanes % 4


def swz_el(row, ch):  # element offset of (row, chunk) in a [rows, 256] swizzled tile
    return row * D + ((ch ^ (row & 7)) << 3)


def to_smem(M):
    s = np.full(M.shape[0] * D, np.nan)
    for r in range(M.shape[0]):
        for ch in range(CH):
            s[swz_el(r, ch):swz_el(r, ch) + 8] = M[r, ch * 8:ch * 8 + 8]
    return s


def ldmatrix(mem, addr, trans=False):
    """mem: element array (2-byte units); addr[32]: byte addresses. Returns regs [32, 4, 2]."""
    assert all(a % 16 == 0 for a in addr)
    out = np.empty((32, 4, 2))
    for i in range(4):
        M = np.array([mem[addr[8 * i + r] // 2:addr[8 * i + r] // 2 + 8] for r in range(8)])
        if trans:
            M = M.T
        out[:, i, 0] = M[lanes // 4, 2 * (lanes % 4)]
        out[:, i, 1] = M[lanes // 4, 2 * (lanes % 4) + 1]
    return out


def mma(C, A, B0, B1):
    """C [32, 4] += A [32, 4, 2] · (B0, B1) [32, 2] (m16n8k16, PTX layouts)."""
    Am = np.full((16, 16), np.nan)
    Bm = np.full((16, 8), np.nan)
    for t in range(32):
        g, c = t // 4, t % 4
        Am[g, 2 * c:2 * c + 2] = A[t, 0]
        Am[g + 8, 2 * c:2 * c + 2] = A[t, 1]
        Am[g, 2 * c + 8:2 * c + 10] = A[t, 2]
        Am[g + 8, 2 * c + 8:2 * c + 10] = A[t, 3]
        Bm[2 * c:2 * c + 2, g] = B0[t]
        Bm[2 * c + 8:2 * c + 10, g] = B1[t]
    Cm = Am @ Bm
    C[:, 0] += Cm[g_, 2 * c4_]
    C[:, 1] += Cm[g_, 2 * c4_ + 1]
    C[:, 2] += Cm[g_ + 8, 2 * c4_]
    C[:, 3] += Cm[g_ + 8, 2 * c4_ + 1]


def block(pos0, rows, window, scale, rng):
    """One block: query rows at positions pos0..pos0+rows-1, keys 0..pos_last. Returns max error."""
    pos_last = pos0 + rows - 1
    Q = np.zeros((BM, D))
    Q[:rows] = rng.standard_normal((rows, D))
    K = rng.standard_normal((pos_last + 1, D))
    V = rng.standard_normal((pos_last + 1, D))
    qs = to_smem(Q)
    sc = scale * np.log2(np.e)
    lo_first = max(0, pos0 - window + 1) if window > 0 else 0
    j_begin = lo_first // BN * BN
    # Per pair: (act_lo, act_hi, full_lo, full_hi) as pair_rng_s.
    rng_s = []
    for pr in range(4):
        p_rows = min(32, rows - pr * 32)
        p_first = pos0 + pr * 32
        p_last = p_first + p_rows - 1
        p_lo_first = max(0, p_first - window + 1) if window > 0 else 0
        p_lo_last = max(0, p_last - window + 1) if window > 0 else 0
        rng_s.append((p_lo_first - (BN - 1), p_last if p_rows > 0 else INT_MIN, p_lo_last,
                      p_first - (BN - 1) if p_rows == 32 else INT_MIN))
    # Per-warp state (warp = 2 pr + hf): o [2][16][32, 4], m, l [32, 4].
    O = {w: np.zeros((2, 16, 32, 4)) for w in range(8)}
    M = {w: np.full((32, 4), -np.inf) for w in range(8)}
    L = {w: np.zeros((32, 4)) for w in range(8)}
    pmem = np.full(4 * 32 * PSTRIDE, np.nan)  # P of the 4 pairs, bf16 elements
    red_max = np.full(4 * 2 * 32, np.nan)
    work = 0
    for j0 in range(j_begin, pos_last + 1, BN):
        Kt = np.zeros((BN, D))
        Vt = np.zeros((BN, D))
        n = min(BN, pos_last + 1 - j0)
        Kt[:n] = K[j0:j0 + n]
        Vt[:n] = V[j0:j0 + n]
        ks, vs = to_smem(Kt), to_smem(Vt)
        for pr in range(4):
            r = rng_s[pr]
            if j0 > r[1] or j0 < r[0]:
                continue
            work += 1
            full = r[2] <= j0 <= r[3]
            S = {}
            mx = {}
            for hf in range(2):
                s = np.zeros((2, 4, 32, 4))
                for kk in range(16):
                    a, b4 = kk // 4, kk % 4
                    q_off = pr * 32 * ROWB + (lanes % 16) * ROWB + (((2 * b4 + lanes // 16) ^ (lanes & 7)) << 4)
                    k_off = (hf * 32 + lanes % 8 + (lanes // 16) * 8) * ROWB + (((2 * b4 + (lanes // 8) % 2) ^ (lanes & 7)) << 4)
                    a0 = ldmatrix(qs, q_off + a * 128)
                    a1 = ldmatrix(qs, q_off + a * 128 + 16 * ROWB)
                    for nt in range(2):
                        b = ldmatrix(ks, k_off + a * 128 + nt * 16 * ROWB)
                        mma(s[0, 2 * nt], a0, b[:, 0], b[:, 1])
                        mma(s[0, 2 * nt + 1], a0, b[:, 2], b[:, 3])
                        mma(s[1, 2 * nt], a1, b[:, 0], b[:, 1])
                        mma(s[1, 2 * nt + 1], a1, b[:, 2], b[:, 3])
                if not full:
                    for mt in range(2):
                        for hr in range(2):
                            rr = pr * 32 + mt * 16 + g_ + hr * 8
                            pos = np.where(rr < rows, pos0 + rr, -1)
                            lo = np.maximum(0, pos - window + 1) if window > 0 else np.zeros(32, int)
                            for nt in range(4):
                                for e in range(2):
                                    j = j0 + hf * 32 + nt * 8 + c4_ * 2 + e
                                    s[mt, nt, :, hr * 2 + e] = np.where((j > pos) | (j < lo), -np.inf, s[mt, nt, :, hr * 2 + e])
                else:  # `full` must mean: no score of the pair is masked
                    for mt in range(2):
                        for hr in range(2):
                            rr = pr * 32 + mt * 16 + g_ + hr * 8
                            assert (rr < rows).all()
                            pos = pos0 + rr
                            lo = np.maximum(0, pos - window + 1) if window > 0 else np.zeros(32, int)
                            for nt in range(4):
                                for e in range(2):
                                    j = j0 + hf * 32 + nt * 8 + c4_ * 2 + e
                                    assert ((j <= pos) & (j >= lo)).all()
                m4 = np.empty((32, 4))
                for i in range(4):
                    mt, hr = i // 2, i % 2
                    v = np.max(s[mt, :, :, hr * 2:hr * 2 + 2], axis=(0, 2))
                    v = np.maximum(v, v[lanes ^ 1])
                    v = np.maximum(v, v[lanes ^ 2])
                    m4[:, i] = v
                    for t in range(32):
                        if t % 4 == 0:
                            red_max[pr * 64 + hf * 32 + mt * 16 + t // 4 + hr * 8] = v[t]
                S[hf], mx[hf] = s, m4
            # pair barrier 1
            pa = {}
            for hf in range(2):
                w = 2 * pr + hf
                s = S[hf]
                corr = np.empty((32, 4))
                for i in range(4):
                    mt, hr = i // 2, i % 2
                    v = np.maximum(mx[hf][:, i], red_max[pr * 64 + (hf ^ 1) * 32 + mt * 16 + g_ + hr * 8])
                    m_new = np.maximum(M[w][:, i], v * sc)
                    with np.errstate(invalid="ignore"):
                        corr[:, i] = np.where(m_new == -np.inf, 1.0, np.exp2(M[w][:, i] - m_new))
                    nb = np.where(m_new == -np.inf, 0.0, -m_new)
                    tot = np.zeros(32)
                    for nt in range(4):
                        for e in range(2):
                            x = np.exp2(s[mt, nt, :, hr * 2 + e] * sc + nb)
                            s[mt, nt, :, hr * 2 + e] = x
                            tot += x
                    L[w][:, i] = L[w][:, i] * corr[:, i] + tot
                    M[w][:, i] = m_new
                # P words: p_w = pp + (ln / 4) * 36 + hf * 16 + ln % 4, + (mt·16 + hr·8)·36 + nt·4
                p = np.empty((2, 2, 32, 4, 2))
                for mt in range(2):
                    for nt in range(4):
                        for hr in range(2):
                            word = pr * 32 * (PSTRIDE // 2) + g_ * (PSTRIDE // 2) + hf * 16 + c4_ + (mt * 16 + hr * 8) * (PSTRIDE // 2) + nt * 4
                            pmem[2 * word] = s[mt, nt, :, hr * 2]
                            pmem[2 * word + 1] = s[mt, nt, :, hr * 2 + 1]
                            p[mt, nt // 2, :, (nt % 2) * 2 + hr, 0] = s[mt, nt, :, hr * 2]
                            p[mt, nt // 2, :, (nt % 2) * 2 + hr, 1] = s[mt, nt, :, hr * 2 + 1]
                for mt in range(2):
                    O[w][mt, :, :, 0:2] *= corr[None, :, 2 * mt:2 * mt + 1]
                    O[w][mt, :, :, 2:4] *= corr[None, :, 2 * mt + 1:2 * mt + 2]
                pa[hf] = p
            # pair barrier 2
            for hf in range(2):
                w = 2 * pr + hf
                v_off = [(lanes % 8 + ((lanes // 8) % 2) * 8) * ROWB + hf * 256 + (((2 * b + lanes // 16) ^ (lanes & 7)) << 4) for b in range(4)]
                p_rd = pr * 32 * PROWB + (lanes % 16) * PROWB + (hf ^ 1) * 64 + (lanes // 16) * 16

                def pv(x0, x1, vbase):
                    for dt in range(8):
                        b = ldmatrix(vs, vbase + v_off[dt % 4] + (dt // 4) * 128, trans=True)
                        mma(O[w][0, 2 * dt], x0, b[:, 0], b[:, 1])
                        mma(O[w][0, 2 * dt + 1], x0, b[:, 2], b[:, 3])
                        mma(O[w][1, 2 * dt], x1, b[:, 0], b[:, 1])
                        mma(O[w][1, 2 * dt + 1], x1, b[:, 2], b[:, 3])

                for kl in range(2):
                    pv(pa[hf][0, kl], pa[hf][1, kl], (hf * 32 + kl * 16) * ROWB)
                for kl in range(2):
                    x0 = ldmatrix(pmem, p_rd + kl * 32)
                    x1 = ldmatrix(pmem, p_rd + kl * 32 + 16 * PROWB)
                    pv(x0, x1, ((hf ^ 1) * 32 + kl * 16) * ROWB)
    # Row sums over the quad and the pair; output.
    out = np.full((rows, D), np.nan)
    for pr in range(4):
        if min(32, rows - pr * 32) <= 0:
            continue
        tot = {}
        for hf in range(2):
            v = L[2 * pr + hf]
            v = v + v[lanes ^ 1]
            v = v + v[lanes ^ 2]
            tot[hf] = v
        for hf in range(2):
            w = 2 * pr + hf
            for i in range(4):
                mt, hr = i // 2, i % 2
                t = tot[hf][:, i] + tot[hf ^ 1][:, i]
                for lane in range(32):
                    r = pr * 32 + mt * 16 + lane // 4 + hr * 8
                    if r >= rows:
                        continue
                    inv = 1.0 / t[lane] if t[lane] > 0 else 0.0
                    for dt in range(16):
                        d = hf * 128 + dt * 8 + (lane % 4) * 2
                        out[r, d] = O[w][mt, dt, lane, hr * 2] * inv
                        out[r, d + 1] = O[w][mt, dt, lane, hr * 2 + 1] * inv
    # Reference: direct softmax per row.
    err = 0.0
    for r in range(rows):
        pos = pos0 + r
        lo = max(0, pos - window + 1) if window > 0 else 0
        sc_ = Q[r] @ K[lo:pos + 1].T * scale
        pr_ = np.exp(sc_ - sc_.max())
        ref = pr_ @ V[lo:pos + 1] / pr_.sum()
        err = max(err, np.abs(out[r] - ref).max())
    return err, work


rng = np.random.default_rng(7)
# (pos0, rows, window, scale): full 128-row tiles on and off the diagonal, partial pairs (104 rows
# = 32 + 32 + 32 + 8; 37 rows; 5 rows: pairs with no rows), windows cutting halves and pairs
# (33, 1, 130), tiles starting mid-window, an explicit scale.
cases = [(0, 128, 0, 1 / 16), (192, 128, 0, 1 / 16), (896, 104, 33, 0.07), (1000, 37, 33, 0.07),
         (61, 128, 1, 1 / 16), (189, 11, 1, 1 / 16), (300, 5, 0, 0.3), (430, 128, 130, 1 / 16)]
for c in cases:
    err, work = block(*c, rng)
    print("block pos0 %d rows %d window %d scale %.4f: %d pair tiles, max |err| %.2e" % (c + (work, err)))
    assert err < 1e-9, c
print("fa2c pairs ok")
