// Test matrices with a known spectrum, built without any SVD: orthonormal
// factors come from the Householder QR (LAPACKE dgeqrf + dorgqr) of a
// Gaussian matrix, so they are an independent oracle for the SVD tests.
#pragma once

#include <cstdint>
#include <vector>

#include "bitrank/tensor.hpp"

namespace bitrank::test {

// Q [rows][cols] with orthonormal columns (rows ≥ cols), f64.
std::vector<double> orthonormal_columns(index_t rows, index_t cols, std::uint64_t seed);

// W = Q1·diag(s)·Q2ᵀ [m][n] rounded to f32, Q1 [m][k] and Q2 [n][k]
// orthonormal (k = s.size() ≤ min(m, n)): its singular values are s up to
// the f32 rounding of W.
std::vector<float> matrix_with_spectrum(index_t m, index_t n, const std::vector<double>& s, std::uint64_t seed);

// All min(m, n) singular values of a row-major f32 W [m][n], non-increasing
// (LAPACKE dgesdd without vectors, f64).
std::vector<double> singular_values(const std::vector<float>& w, index_t m, index_t n);

// ‖a − b‖_F / ‖b‖_F in f64.
double rel_diff(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace bitrank::test
