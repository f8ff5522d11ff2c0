# Run: python3 scripts/emulate/attn_tc_fragments.py (numpy; no GPU).
# Lane-level check of decode_tc_kernel's ldmatrix addresses and mma fragment use (PTX layouts of
# ldmatrix.m8n8.x4[.trans] and mma.m16n8k16 row.col): S = Q K[16w..16w+15]ᵀ and O = P V for
# every warp w, tiles in the XOR-swizzled shared layout.
import numpy as np
for D in (64, 128, 256):
    BN = 64; CH = D // 8
    swz = lambda row, ch: row * D + ((ch ^ (row & 7)) << 3)
    rng = np.random.default_rng(D)
    Q = rng.standard_normal((16, D)); K = rng.standard_normal((BN, D)); V = rng.standard_normal((BN, D))
    def to_smem(M):
        s = np.full(M.shape[0] * D, np.nan)
        for r in range(M.shape[0]):
            for ch in range(CH): s[swz(r, ch):swz(r, ch) + 8] = M[r, ch * 8:ch * 8 + 8]
        return s
    qs, ks, vs = to_smem(Q), to_smem(K), to_smem(V)
    def ldmatrix(smem, addr, trans=False):
        regs = [[None] * 4 for _ in range(32)]
        for i in range(4):
            M = np.array([smem[addr(8 * i + r):addr(8 * i + r) + 8] for r in range(8)])
            if trans: M = M.T
            for t in range(32): regs[t][i] = (M[t // 4, 2 * (t % 4)], M[t // 4, 2 * (t % 4) + 1])
        return regs
    def mma(C, A, B0, B1):
        Am = np.full((16, 16), np.nan); Bm = np.full((16, 8), np.nan)
        for t in range(32):
            g, c = t // 4, t % 4
            Am[g, 2*c:2*c+2] = A[t][0]; Am[g+8, 2*c:2*c+2] = A[t][1]
            Am[g, 2*c+8:2*c+10] = A[t][2]; Am[g+8, 2*c+8:2*c+10] = A[t][3]
            Bm[2*c:2*c+2, g] = B0[t]; Bm[2*c+8:2*c+10, g] = B1[t]
        Cm = Am @ Bm
        for t in range(32):
            g, c = t // 4, t % 4
            C[t][0] += Cm[g, 2*c]; C[t][1] += Cm[g, 2*c+1]; C[t][2] += Cm[g+8, 2*c]; C[t][3] += Cm[g+8, 2*c+1]
    for warp in range(4):
        s = [[[0.0] * 4 for _ in range(32)] for _ in range(2)]
        for kk in range(D // 16):
            a = ldmatrix(qs, lambda l: swz(l % 16, kk * 2 + l // 16))
            b = ldmatrix(ks, lambda l: swz(warp * 16 + (l % 8) + (l // 16) * 8, kk * 2 + (l // 8) % 2))
            mma(s[0], a, [b[t][0] for t in range(32)], [b[t][1] for t in range(32)])
            mma(s[1], a, [b[t][2] for t in range(32)], [b[t][3] for t in range(32)])
        got = np.full((16, 16), np.nan)
        for nt in range(2):
            for t in range(32):
                g, c4 = t // 4, t % 4
                for hr in range(2):
                    for e in range(2):
                        got[g + hr * 8, nt * 8 + c4 * 2 + e] = s[nt][t][hr * 2 + e]  # key index as masked
        ref = Q @ K[warp * 16:warp * 16 + 16].T
        assert np.abs(got - ref).max() < 1e-9, ("QK", D, warp)
        a = [((s[0][t][0], s[0][t][1]), (s[0][t][2], s[0][t][3]), (s[1][t][0], s[1][t][1]), (s[1][t][2], s[1][t][3])) for t in range(32)]
        o = [[[0.0] * 4 for _ in range(32)] for _ in range(D // 8)]
        for dt in range(D // 16):
            b = ldmatrix(vs, lambda l: swz(warp * 16 + (l % 8) + ((l // 8) % 2) * 8, dt * 2 + l // 16), trans=True)
            mma(o[2 * dt], a, [b[t][0] for t in range(32)], [b[t][1] for t in range(32)])
            mma(o[2 * dt + 1], a, [b[t][2] for t in range(32)], [b[t][3] for t in range(32)])
        goto = np.full((16, D), np.nan)
        for dt in range(D // 8):
            for t in range(32):
                g, c4 = t // 4, t % 4
                for hr in range(2):  # the o_s write: row g + 8hr, columns 8dt + 2c4 + {0, 1}
                    goto[g + hr * 8, dt * 8 + c4 * 2] = o[dt][t][hr * 2]
                    goto[g + hr * 8, dt * 8 + c4 * 2 + 1] = o[dt][t][hr * 2 + 1]
        assert np.abs(goto - ref @ V[warp * 16:warp * 16 + 16]).max() < 1e-9, ("PV", D, warp)
    print("D", D, "fragments ok")

# The tile loader: every (row, chunk) of a 64-key tile copied exactly once, and the row a thread
# copies in step `it` is the row its shuffle source lane (it·RPI + lane / CH) looked up.
for D in (64, 128, 256):
    CH = D // 8; RPI = 32 // CH; STEPS = 64 * CH // 128
    assert STEPS * RPI == 16
    seen = {}
    for warp in range(4):
        looked = {}
        for lane in range(16):
            looked[lane] = (warp * 32 + (lane // RPI) * 128) // CH + lane % RPI
        for it in range(STEPS):
            for lane in range(32):
                c = warp * 32 + lane + it * 128
                r, ch = c // CH, c % CH
                src = it * RPI + lane // CH
                assert src < 16 and looked[src] == r, (D, warp, it, lane)
                assert (r, ch) not in seen
                seen[(r, ch)] = True
    assert len(seen) == 64 * CH
    print("D", D, "loader ok")

# The same loader mapping in attn_prefill.cuda_tc's load_kv (offsets through row_off_s) (BN / 4 rows per warp: BN 64 at D
# 64 / 128, 32 at D 256).
for D, BN in ((64, 64), (128, 64), (256, 32), (256, 64)):
    CH = D // 8; RPI = 32 // CH; STEPS = BN * CH // 128
    assert STEPS * RPI == BN // 4 <= 32
    seen = set()
    for warp in range(4):
        looked = {i: (warp * 32 + (i // RPI) * 128) // CH + i % RPI for i in range(BN // 4)}
        for it in range(STEPS):
            for lane in range(32):
                c = warp * 32 + lane + it * 128
                r, ch = c // CH, c % CH
                src = it * RPI + lane // CH
                assert src < BN // 4 and looked[src] == r, (D, BN, warp, it, lane)
                assert (r, ch) not in seen
                seen.add((r, ch))
    assert len(seen) == BN * CH
    print("prefill D", D, "BN", BN, "loader ok")
