#!/usr/bin/env python3
"""Host check of prep_kernel's T = (I + A)⁻¹ by 16×16 blocks (src/cuda/gdn_chunk.cu).

Transcribes the kernel's loops (the per-column substitution inside the
diagonal blocks in the kernel's row order, then the blocks below the
diagonal by distance, each phase computed in full before it is written, as
the barriers order it) and compares T with a matrix inverse, for strictly
lower triangular A with its rows past L zero. Change one, change the other.
    python3 tools/check_blocked_inverse.py
"""
import numpy as np

KC = 64


def blocked_inverse(A):
    T = np.eye(KC)
    for j in range(KC):  # diagonal blocks: column j, rows of its block below it
        end = (j & ~15) + 16
        for r in range((j & ~7) + 1, end):
            if j < r:
                T[r, j] = -A[r, j] - sum(A[r, s] * T[s, j] for s in range(j + 1, r))
    for dist in range(1, KC // 16):
        blocks = KC // 16 - dist
        x = {}
        for jb in range(blocks):  # X_ij = Σ_{k=j}^{i−1} A_ik T_kj
            for e in range(256):
                r, col = 16 * (jb + dist) + e // 16, 16 * jb + e % 16
                x[(r, col)] = sum(A[r, s] * T[s, col] for s in range(16 * jb, 16 * (jb + dist)))
        for k, v in x.items():
            T[k] = v
        t = {}
        for jb in range(blocks):  # T_ij = −T_ii X_ij
            ib = jb + dist
            for e in range(256):
                r, col = 16 * ib + e // 16, 16 * jb + e % 16
                t[(r, col)] = -(T[r, col] + sum(T[r, s] * T[s, col] for s in range(16 * ib, r)))
        for k, v in t.items():
            T[k] = v
    return T


def main():
    rng = np.random.default_rng(1)
    worst = 0.0
    for L in (64, 45, 17, 1):
        A = np.tril(rng.standard_normal((KC, KC)) * 0.3, -1)
        A[L:, :] = 0
        err = np.abs(blocked_inverse(A) - np.linalg.inv(np.eye(KC) + A)).max()
        worst = max(worst, err)
        print(f"L {L:2}: max |T − (I+A)⁻¹| = {err:.2e}")
    raise SystemExit(0 if worst < 1e-10 else 1)


if __name__ == "__main__":
    main()
