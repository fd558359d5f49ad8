// Checked CUDA, cuBLAS and cuSOLVER calls. Every runtime / cuBLAS(Lt) call
// goes through BR_CUDA_CHECK / BR_CUBLAS_CHECK, every cuSOLVER call through
// BR_CUSOLVER_CHECK (its files include cusolverDn.h), and every kernel
// launch is followed by
// BR_CUDA_LAUNCHED(); a failure throws bitrank::Error naming the call, the
// code and the file:line (a sticky device error leaves the context unusable,
// so callers only report it).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace bitrank::cuda {

[[noreturn]] void report_cuda_error(const char* call, int code, const char* what, const char* file, int line);
[[noreturn]] void report_cublas_error(const char* call, int code, const char* file, int line);
[[noreturn]] void report_cusolver_error(const char* call, int code, const char* file, int line);

}  // namespace bitrank::cuda

#define BR_CUDA_CHECK(call)                                                                              \
  do {                                                                                                   \
    const cudaError_t br_err_ = (call);                                                                  \
    if (br_err_ != cudaSuccess)                                                                          \
      ::bitrank::cuda::report_cuda_error(#call, static_cast<int>(br_err_), cudaGetErrorString(br_err_), \
                                         __FILE__, __LINE__);                                            \
  } while (0)

#define BR_CUBLAS_CHECK(call)                                                                               \
  do {                                                                                                      \
    const cublasStatus_t br_st_ = (call);                                                                   \
    if (br_st_ != CUBLAS_STATUS_SUCCESS)                                                                    \
      ::bitrank::cuda::report_cublas_error(#call, static_cast<int>(br_st_), __FILE__, __LINE__);            \
  } while (0)

#define BR_CUSOLVER_CHECK(call)                                                                             \
  do {                                                                                                      \
    const cusolverStatus_t br_st_ = (call);                                                                 \
    if (br_st_ != CUSOLVER_STATUS_SUCCESS)                                                                  \
      ::bitrank::cuda::report_cusolver_error(#call, static_cast<int>(br_st_), __FILE__, __LINE__);          \
  } while (0)

// After every kernel launch: catches bad launch configurations at once.
#define BR_CUDA_LAUNCHED() BR_CUDA_CHECK(cudaGetLastError())
