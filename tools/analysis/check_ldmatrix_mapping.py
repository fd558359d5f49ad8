#!/usr/bin/env python3
"""Host check of tile::Acc::mma(Split, Split)'s fragment mapping (src/cuda/tile_mma.cuh).

Simulates ldmatrix (.x4, with and without .trans) and the m16n8k16 mma
fragment layout for the lane addresses that tile_mma.cuh computes, for the
four layout pairs (A Row/Col, B Col/Row), and checks that the fragments a
warp receives are exactly the 16x16 block of A and the 16x8 block of B the
mma expects (B's matrices 2 and 3, the lo plane, at the same places as 0
and 1 of the hi plane). Mirrors the formulas of the C++ by hand: change one,
change the other.
    python3 tools/analysis/check_ldmatrix_mapping.py
"""
import numpy as np


def ldmatrix(mem, addrs, trans):
    """regs[t][q] = the pair thread t receives from matrix q (rows at addrs[8q + j])."""
    regs = [[None] * 4 for _ in range(32)]
    for q in range(4):
        mat = np.array([mem[addrs[8 * q + j]:addrs[8 * q + j] + 8] for j in range(8)])
        for t in range(32):
            if trans:
                regs[t][q] = (mat[2 * (t % 4)][t // 4], mat[2 * (t % 4) + 1][t // 4])
            else:
                regs[t][q] = (mat[t // 4][2 * (t % 4)], mat[t // 4][2 * (t % 4) + 1])
    return regs


def check(a_row, b_col, rng, M=32, N=16, K=32, ld=40, m0=16, n0=8, k=16):
    A = rng.standard_normal((M, K))
    B = rng.standard_normal((K, N))
    SA = np.zeros((M, ld) if a_row else (K, ld))
    if a_row:
        SA[:, :K] = A
    else:
        SA[:, :M] = A.T
    SB = np.zeros((N, ld) if b_col else (K, ld))
    if b_col:
        SB[:, :K] = B.T
    else:
        SB[:, :N] = B
    a_addr, b_addr = [], []
    for lane in range(32):
        a_r = (lane & 15) if a_row else (lane & 7) + 8 * (lane >> 4)
        a_c = 8 * (lane >> 4) if a_row else 8 * ((lane >> 3) & 1)
        a_addr.append((m0 + a_r) * ld + k + a_c if a_row else (k + a_r) * ld + m0 + a_c)
        b_r = (lane & 7) + (0 if b_col else 8 * ((lane >> 3) & 1))
        b_c = 8 * ((lane >> 3) & 1) if b_col else 0
        b_addr.append((n0 + b_r) * ld + k + b_c if b_col else (k + b_r) * ld + n0 + b_c)
    ra = ldmatrix(SA.flatten(), a_addr, not a_row)
    rb = ldmatrix(SB.flatten(), b_addr, not b_col)
    At = np.full((16, 16), np.nan)
    Bt = np.full((16, 8), np.nan)
    for t in range(32):
        g, q = t // 4, t % 4
        At[g, 2 * q:2 * q + 2] = ra[t][0]
        At[g + 8, 2 * q:2 * q + 2] = ra[t][1]
        At[g, 2 * q + 8:2 * q + 10] = ra[t][2]
        At[g + 8, 2 * q + 8:2 * q + 10] = ra[t][3]
        Bt[2 * q:2 * q + 2, g] = rb[t][0]
        Bt[2 * q + 8:2 * q + 10, g] = rb[t][1]
        if rb[t][2] != rb[t][0] or rb[t][3] != rb[t][1]:
            return False
    return np.array_equal(At, A[m0:m0 + 16, k:k + 16]) and np.array_equal(Bt, B[k:k + 16, n0:n0 + 8])


def main():
    rng = np.random.default_rng(0)
    ok = True
    for a_row in (True, False):
        for b_col in (True, False):
            good = check(a_row, b_col, rng)
            ok &= good
            print(f"A {'Row' if a_row else 'Col'}  B {'Col' if b_col else 'Row'}  {'ok' if good else 'WRONG'}")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
