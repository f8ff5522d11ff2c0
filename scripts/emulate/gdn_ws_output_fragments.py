# Run: python3 scripts/emulate/gdn_ws_output_fragments.py (numpy; no GPU). Keep in step with the kernel.
# Lane-level check of the warpgroup spine's fused output (src/cuda/gdn_chunk_tc.cu: ws_output, and
# the producer's Q̂ / K̂ / γ copies of spine_ws_kernel<St, Out>), in f64 so that only the index
# math is under test: every (row, 16-byte piece) of the ring's Q̂ and K̂ tiles copied once to the
# swizzled address ws_output's ldmatrix reads; the ldmatrix.m8n8.x4[.trans] / mma.m16n8k16
# fragments of O = e^γ ⊙ (Q̂ hᵀ), P = tril(Q̂ K̂ᵀ ⊙ e^{γ_i − γ_j}) (column tiles <= warp only) and
# O += P V_new (P straight from the accumulators), against a direct reference, for full and
# partial chunks (rows >= L not stored, Q̂ / K̂ rows >= L zero-filled as the copies do).
import numpy as np

KC, KD, ROWS = 64, 128, 64            # kC, kD, kWgRows
TILE = KC * KD * 2                    # kWgTile bytes
G_OFF = 2 * TILE + KC * 128           # kWgGOff
Q_OFF = (G_OFF + KC * 4 + 1023) // 1024 * 1024  # kWgQOff
H_LD, V_LD = KD + 8, ROWS + 8         # kWsHLd, kWsVLd


def sw128(r, c):
    return r * 128 + ((c ^ (r % 8)) * 16)


def tile(off, r, d):  # ws_output's tile(): byte offset of row r's piece at column d (d % 8 == 0)
    assert d % 8 == 0
    return off + (d // 64) * (TILE // 2) + sw128(r, (d % 64) // 8)


def ldmatrix(read, addr, trans=False):
    """read(byte address, 8) -> 8 elements; addr(lane) -> the row address lane gives."""
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        M = np.array([read(addr(8 * i + r)) for r in range(8)])
        if trans:
            M = M.T
        for t in range(32):
            regs[t][i] = (M[t // 4, 2 * (t % 4)], M[t // 4, 2 * (t % 4) + 1])
    return regs


def mma(C, A, B0, B1):
    Am = np.full((16, 16), np.nan)
    Bm = np.full((16, 8), np.nan)
    for t in range(32):
        g, c = t // 4, t % 4
        Am[g, 2 * c:2 * c + 2] = A[t][0]
        Am[g + 8, 2 * c:2 * c + 2] = A[t][1]
        Am[g, 2 * c + 8:2 * c + 10] = A[t][2]
        Am[g + 8, 2 * c + 8:2 * c + 10] = A[t][3]
        Bm[2 * c:2 * c + 2, g] = B0[t]
        Bm[2 * c + 8:2 * c + 10, g] = B1[t]
    Cm = Am @ Bm
    for t in range(32):
        g, c = t // 4, t % 4
        C[t][0] += Cm[g, 2 * c]
        C[t][1] += Cm[g, 2 * c + 1]
        C[t][2] += Cm[g + 8, 2 * c]
        C[t][3] += Cm[g + 8, 2 * c + 1]


def run(L, seed):
    rng = np.random.default_rng(seed)
    Qh = rng.standard_normal((KC, KD))
    Kh = rng.standard_normal((KC, KD))
    H = rng.standard_normal((ROWS, KD))          # h[c] = bf16(S): [v][d]
    Vn = rng.standard_normal((KC, ROWS))         # V_new [i][v], rows >= L zero (the consumer's)
    Vn[L:] = 0.0
    gam = np.cumsum(-rng.random(KC) * 0.1)
    gam[L:] = 0.0                                # zero-filled past L
    scale = 0.088
    # The ring stage as bf16 elements by byte address / 2; the producer's copies (rw = ct / 16,
    # pw = ct % 16; rows rw + 8k; the partial chunk zero-fills rows >= L).
    ring = np.full((Q_OFF + TILE) // 2, np.nan)
    written = np.zeros_like(ring, dtype=int)
    for ct in range(128):
        rw, pw = ct // 16, ct % 16
        w_dst = (pw // 8) * (TILE // 2) + sw128(rw, pw % 8)
        for k in range(KC // 8):
            i = rw + 8 * k
            for base, M in ((TILE + w_dst, Kh), (Q_OFF + w_dst, Qh)):
                a = (base + k * 1024) // 2
                ring[a:a + 8] = M[i, 8 * pw:8 * pw + 8] if i < L else 0.0
                written[a:a + 8] += 1
    for t0 in (TILE // 2, Q_OFF // 2):
        assert (written[t0:t0 + TILE // 2] == 1).all(), "each piece copied exactly once"
    read_ring = lambda b: ring[b // 2:b // 2 + 8]
    hs = np.full(ROWS * H_LD, np.nan)
    for v in range(ROWS):
        hs[v * H_LD:v * H_LD + KD] = H[v]
    vs = np.full(KC * V_LD, np.nan)
    for i in range(KC):
        vs[i * V_LD:i * V_LD + ROWS] = Vn[i]
    read_h = lambda b: hs[b // 2:b // 2 + 8]
    read_v = lambda b: vs[b // 2:b // 2 + 8]
    Qz, Kz = Qh.copy(), Kh.copy()
    Qz[L:] = 0.0
    Kz[L:] = 0.0
    D = np.exp(gam[:, None] - gam[None, :]) * np.tril(np.ones((KC, KC)))
    ref = scale * (np.exp(gam)[:, None] * (Qz @ H.T) + ((Qz @ Kz.T) * D) @ Vn)
    out = np.full((KC, ROWS), np.nan)
    for warp in range(4):
        acc = [[[0.0] * 4 for _ in range(32)] for _ in range(8)]
        pa = [[[0.0] * 4 for _ in range(32)] for _ in range(8)]
        for ks in range(KD // 16):
            a = ldmatrix(read_ring, lambda l: tile(Q_OFF, 16 * warp + (l & 15), 16 * ks + 8 * (l >> 4)))
            a = [tuple(a[t]) for t in range(32)]
            for np_ in range(4):
                b_row = lambda l: (l & 7) + 8 * (l >> 4) + 16 * np_
                b_col = lambda l: 8 * ((l >> 3) & 1) + 16 * ks
                b = ldmatrix(read_h, lambda l: 2 * (b_row(l) * H_LD + b_col(l)))
                mma(acc[2 * np_], a, [b[t][0] for t in range(32)], [b[t][1] for t in range(32)])
                mma(acc[2 * np_ + 1], a, [b[t][2] for t in range(32)], [b[t][3] for t in range(32)])
                if np_ <= warp:
                    b = ldmatrix(read_ring, lambda l: tile(TILE, b_row(l), b_col(l)))
                    mma(pa[2 * np_], a, [b[t][0] for t in range(32)], [b[t][1] for t in range(32)])
                    mma(pa[2 * np_ + 1], a, [b[t][2] for t in range(32)], [b[t][3] for t in range(32)])
        for t in range(32):
            g, q = t // 4, t % 4
            i_lo, i_hi = 16 * warp + g, 16 * warp + g + 8
            for nt in range(8):
                acc[nt][t][0] *= np.exp(gam[i_lo]); acc[nt][t][1] *= np.exp(gam[i_lo])
                acc[nt][t][2] *= np.exp(gam[i_hi]); acc[nt][t][3] *= np.exp(gam[i_hi])
                j = nt * 8 + 2 * q
                on = nt // 2 <= warp
                for e, (i, jj) in enumerate(((i_lo, j), (i_lo, j + 1), (i_hi, j), (i_hi, j + 1))):
                    ok = on and jj <= i and i < L
                    pa[nt][t][e] = pa[nt][t][e] * np.exp(gam[i] - gam[jj]) if ok else 0.0
        for kt in range(KC // 16):
            if kt > warp:
                continue
            a = [((pa[2 * kt][t][0], pa[2 * kt][t][1]), (pa[2 * kt][t][2], pa[2 * kt][t][3]),
                  (pa[2 * kt + 1][t][0], pa[2 * kt + 1][t][1]), (pa[2 * kt + 1][t][2], pa[2 * kt + 1][t][3]))
                 for t in range(32)]
            for np_ in range(4):  # load_b2_trans(b0, b1, vs, kWsVLd, 16kt, 16np, lane)
                b = ldmatrix(read_v, lambda l: 2 * ((16 * kt + (l & 15)) * V_LD + 16 * np_ + 8 * (l >> 4)),
                             trans=True)
                mma(acc[2 * np_], a, [b[t][0] for t in range(32)], [b[t][1] for t in range(32)])
                mma(acc[2 * np_ + 1], a, [b[t][2] for t in range(32)], [b[t][3] for t in range(32)])
        for t in range(32):
            g, q = t // 4, t % 4
            for hi in range(2):
                i = 16 * warp + g + 8 * hi
                if i >= L:
                    continue
                for nt in range(8):
                    out[i, nt * 8 + 2 * q] = scale * acc[nt][t][2 * hi]
                    out[i, nt * 8 + 2 * q + 1] = scale * acc[nt][t][2 * hi + 1]
    assert np.isnan(out[L:]).all(), "rows past L untouched"
    err = np.abs(out[:L] - ref[:L]).max()
    assert err < 1e-9, ("output", L, err)
    print(f"L {L}: output ok (max error {err:.1e})")


for L, seed in ((64, 1), (37, 2), (1, 3)):
    run(L, seed)
