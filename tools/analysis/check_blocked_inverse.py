#!/usr/bin/env python3
"""Host check of prep_kernel's T = (I + A)⁻¹ by 16×16 blocks (src/cuda/gdn_chunk.cu).

Transcribes the kernel: the per-column substitution inside the diagonal
blocks in the kernel's row order, then the blocks below the diagonal by
distance, each as two products (X_ij = Σ_{k=j}^{i−1} A_ik T_kj, then
T_ij = −T_ii X_ij), which the kernel takes on the tensor cores in 3xBF16:
each operand x split into hi = bf16(x) and lo = bf16(x − hi), the product
summed as lo·hi + hi·lo + hi·hi (tile_mma.cuh). Change one, change the other.

Two checks:
  · the algebra, with exact products: T equals a matrix inverse (1e-10);
  · the numerics, with the products emulated in 3xBF16 (f32 tiles between
    them), on matrices A the way prep forms them from GDN-like inputs
    (A_rs = β_r e^{c_r − c_s} k̂_r·k̂_s, s < r < L, unit keys of 128 values,
    independent or strongly correlated): the relative L2 error of T and of
    W = T diag(βe^c) K against f64, next to the same with f32 products.
    python3 tools/analysis/check_blocked_inverse.py
"""
import numpy as np

KC = 64


def bf16(x):
    """Round to the nearest bf16 (ties to even), returned as float64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def f32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def product(a, b, mode):
    """a @ b as the kernel takes it: exact (f64), f32, or 3xBF16 with f32 sums."""
    if mode == "exact":
        return a @ b
    if mode == "f32":
        return f32(f32(a) @ f32(b))
    ah, bh = bf16(a), bf16(b)
    al, bl = bf16(f32(a) - ah), bf16(f32(b) - bh)
    return f32(f32(f32(al @ bh) + f32(ah @ bl)) + f32(ah @ bh))


def blocked_inverse(A, mode="exact"):
    rnd = (lambda x: x) if mode == "exact" else f32
    T = np.eye(KC)
    for j in range(KC):  # diagonal blocks: column j, rows of its block below it (f32 FMAs in the kernel)
        end = (j & ~15) + 16
        for r in range((j & ~7) + 1, end):
            if j < r:
                T[r, j] = rnd(-A[r, j] - sum(A[r, s] * T[s, j] for s in range(j + 1, r)))
    for dist in range(1, KC // 16):  # a warp a block; the blocks of one distance read none of each other's
        for jb in range(KC // 16 - dist):
            ib = jb + dist
            rows, cols = slice(16 * ib, 16 * ib + 16), slice(16 * jb, 16 * jb + 16)
            X = product(A[rows, 16 * jb:16 * ib], T[16 * jb:16 * ib, cols], mode)
            T[rows, cols] = -product(T[rows, rows], X, mode)
    return T


def gdn_like_A(rng, L, correlated, beta_hi):
    """A as prep forms it (strictly lower, rows ≥ L zero) and the K, β, c behind it."""
    d = 128
    base = rng.standard_normal(d)
    K = rng.standard_normal((KC, d)) + (4.0 * base if correlated else 0.0)
    K /= np.linalg.norm(K, axis=1, keepdims=True)
    beta = rng.uniform(0.5 if beta_hi else 0.0, 1.0, KC)
    c = np.cumsum(-rng.uniform(0.0, 0.05, KC))
    K, beta, c = f32(K), f32(beta), f32(c)
    M = np.exp(c[:, None] - c[None, :])
    A = np.tril(beta[:, None] * M * (K @ K.T), -1)
    A[L:, :] = 0
    K[L:, :], beta[L:] = 0, 0
    return f32(A), K, beta, c


def rel(x, ref):
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


def main():
    rng = np.random.default_rng(1)
    worst = 0.0
    for L in (64, 45, 17, 1):
        A = np.tril(rng.standard_normal((KC, KC)) * 0.3, -1)
        A[L:, :] = 0
        err = np.abs(blocked_inverse(A) - np.linalg.inv(np.eye(KC) + A)).max()
        worst = max(worst, err)
        print(f"algebra, L {L:2}: max |T − (I+A)⁻¹| = {err:.2e}")
    ok = worst < 1e-10
    print("numerics: relative L2 against f64   T (3xBF16)   T (f32)    W (3xBF16)   W (f32)")
    worst_split = 0.0
    for correlated in (False, True):
        for beta_hi in (False, True):
            for L in (64, 45):
                A, K, beta, c = gdn_like_A(rng, L, correlated, beta_hi)
                T64 = np.linalg.inv(np.eye(KC) + A)
                W64 = T64 @ ((beta * np.exp(c))[:, None] * K)
                row = []
                for mode in ("split", "f32"):
                    T = blocked_inverse(A, mode)
                    W = T @ ((beta * np.exp(c))[:, None] * K)  # the W product's own error is not the question here
                    row += [rel(T, T64), rel(W, W64)]
                worst_split = max(worst_split, row[0], row[1])
                print(f"  keys {'correlated' if correlated else 'independent':11}, β {'0.5–1' if beta_hi else '0–1  '}, "
                      f"L {L:2}:   {row[0]:.2e}     {row[2]:.2e}   {row[1]:.2e}     {row[3]:.2e}")
    # T's share of the GDN ops' 2e-4 tolerance: a quarter, the products after it take the rest.
    print(f"worst 3xBF16 error {worst_split:.2e} (budget 5e-5 of the GDN ops' 2e-4)")
    raise SystemExit(0 if ok and worst_split < 5e-5 else 1)


if __name__ == "__main__":
    main()
