// Which cuBLASLt pointer modes (a device alpha vector over D's rows, a device
// scalar) have an algorithm for the BLR layer's GEMM forms on this GPU:
// A = plane [n][k] used transposed, B = act [m][k], D = outᵀ column-major
// (n×m), f32 accumulation, for several operand/output types. Prints one
// line per combination: algorithms found (heuristic, up to 8) and, for the
// first, the largest relative error against the same GEMM with a host
// alpha followed by the column scale on the host.
//   nvcc -O2 -arch=sm_90a tools/analysis/probe_lt_alpha_vector.cu -lcublasLt -o /tmp/probe && /tmp/probe
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#define CK(x) do { auto e_ = (x); if (e_ != 0) { std::printf("%s:%d error %d\n", __FILE__, __LINE__, (int)e_); std::exit(1); } } while (0)

int main() {
  const int n = 5120, m = 4096, k = 1024;  // D: n×m (outᵀ), plane n×k, act m×k
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  std::vector<__half> ha(static_cast<size_t>(n) * k), hb(static_cast<size_t>(m) * k);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = __float2half((i * 2654435761u >> 7) % 2 ? 1.0f : -1.0f);
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = __float2half(((i * 40503u) % 997) / 997.0f - 0.5f);
  std::vector<float> alpha(n);
  for (int i = 0; i < n; ++i) alpha[i] = 0.25f + (i % 13) * 0.0625f;
  __half *da, *db; float *dalpha, *dd, *dref; void* ws;
  const size_t ws_bytes = 64 << 20;
  CK(cudaMalloc(&da, ha.size() * 2)); CK(cudaMalloc(&db, hb.size() * 2));
  CK(cudaMalloc(&dalpha, n * 4)); CK(cudaMalloc(&dd, static_cast<size_t>(n) * m * 4)); CK(cudaMalloc(&dref, static_cast<size_t>(n) * m * 4));
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dalpha, alpha.data(), n * 4, cudaMemcpyHostToDevice));
  struct Types { const char* name; cudaDataType_t ab, cd; cublasComputeType_t comp; cudaDataType_t scale; };
  const Types types[] = {
      {"f16 in, f32 out, compute 32F", CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
      {"f16 in, f16 out, compute 32F", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
      {"bf16 in, f32 out, compute 32F", CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
      {"f32 in, f32 out, compute 32F_FAST_16F", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16F, CUDA_R_32F},
  };
  struct Mode { const char* name; cublasLtPointerMode_t mode; };
  const Mode modes[] = {{"HOST", CUBLASLT_POINTER_MODE_HOST},
                        {"DEVICE", CUBLASLT_POINTER_MODE_DEVICE},
                        {"DEVICE_VECTOR", CUBLASLT_POINTER_MODE_DEVICE_VECTOR},
                        {"ALPHA_DEVICE_VECTOR_BETA_ZERO", CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO},
                        {"ALPHA_DEVICE_VECTOR_BETA_HOST", CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST}};
  for (const Types& t : types) {
    for (const Mode& md : modes) {
      cublasLtMatmulDesc_t op; cublasLtMatrixLayout_t la, lb, lc;
      CK(cublasLtMatmulDescCreate(&op, t.comp, t.scale));
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
      CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
      const cublasStatus_t sm = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &md.mode, sizeof(md.mode));
      CK(cublasLtMatrixLayoutCreate(&la, t.ab, k, n, k));
      CK(cublasLtMatrixLayoutCreate(&lb, t.ab, k, m, k));
      CK(cublasLtMatrixLayoutCreate(&lc, t.cd, n, m, n));
      cublasLtMatmulPreference_t pref;
      CK(cublasLtMatmulPreferenceCreate(&pref));
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
      cublasLtMatmulHeuristicResult_t res[8];
      int found = 0;
      const cublasStatus_t sh = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 8, res, &found);
      double err = -1;
      float ms = -1;
      if (sh == CUBLAS_STATUS_SUCCESS && found > 0 && t.ab == CUDA_R_16F && t.cd == CUDA_R_32F) {
        // run it (alpha per mode), compare with the host-alpha GEMM scaled on the host
        const float one = 1.0f, zero = 0.0f;
        float *dev_one, *dev_zero;
        CK(cudaMalloc(&dev_one, 4)); CK(cudaMalloc(&dev_zero, 4));
        CK(cudaMemcpy(dev_one, &one, 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dev_zero, &zero, 4, cudaMemcpyHostToDevice));
        const bool vec = md.mode >= CUBLASLT_POINTER_MODE_DEVICE_VECTOR;
        const void* a_ptr = vec ? static_cast<const void*>(dalpha) : md.mode == CUBLASLT_POINTER_MODE_DEVICE ? dev_one : &one;
        const void* b_ptr = md.mode == CUBLASLT_POINTER_MODE_DEVICE ? dev_zero : md.mode == CUBLASLT_POINTER_MODE_DEVICE_VECTOR ? static_cast<const void*>(dev_zero) : &zero;
        std::vector<float> zeros(n, 0.0f);
        float* dzeros = nullptr;
        if (md.mode == CUBLASLT_POINTER_MODE_DEVICE_VECTOR) { CK(cudaMalloc(&dzeros, n * 4)); CK(cudaMemcpy(dzeros, zeros.data(), n * 4, cudaMemcpyHostToDevice)); b_ptr = dzeros; }
        cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
        CK(cublasLtMatmul(lt, op, a_ptr, da, la, db, lb, b_ptr, dd, lc, dd, lc, &res[0].algo, ws, ws_bytes, 0));
        cudaEventRecord(e0);
        for (int it = 0; it < 20; ++it)
          CK(cublasLtMatmul(lt, op, a_ptr, da, la, db, lb, b_ptr, dd, lc, dd, lc, &res[0].algo, ws, ws_bytes, 0));
        cudaEventRecord(e1);
        CK(cudaDeviceSynchronize());
        cudaEventElapsedTime(&ms, e0, e1);
        ms /= 20;
        // reference: host-alpha 1 GEMM, scaled on the host
        cublasLtMatmulDesc_t op2;
        CK(cublasLtMatmulDescCreate(&op2, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(op2, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
        CK(cublasLtMatmulDescSetAttribute(op2, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
        CK(cublasLtMatmul(lt, op2, &one, da, la, db, lb, &zero, dref, lc, dref, lc, nullptr, ws, ws_bytes, 0));
        CK(cudaDeviceSynchronize());
        std::vector<float> got(static_cast<size_t>(n) * m), ref(got.size());
        CK(cudaMemcpy(got.data(), dd, got.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ref.data(), dref, ref.size() * 4, cudaMemcpyDeviceToHost));
        err = 0;
        for (int col = 0; col < m; col += 97)
          for (int row = 0; row < n; ++row) {
            const double want = static_cast<double>(ref[static_cast<size_t>(col) * n + row]) * (vec ? alpha[row] : 1.0);
            const double d = std::fabs(got[static_cast<size_t>(col) * n + row] - want) / (std::fabs(want) + 1e-3);
            if (d > err) err = d;
          }
        cudaFree(dev_one); cudaFree(dev_zero); if (dzeros) cudaFree(dzeros);
        cublasLtMatmulDescDestroy(op2);
      }
      std::printf("%-40s %-32s set %d heuristic %d found %d", t.name, md.name, (int)sm, (int)sh, found);
      if (err >= 0) std::printf("   %.3f ms  max rel err %.2e", ms, err);
      std::printf("\n");
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(op);
    }
  }
  std::printf("cublasLt version %zu\n", cublasLtGetVersion());
  return 0;
}
