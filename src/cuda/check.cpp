#include "bitrank/error.hpp"
#include "cuda/check.hpp"

namespace bitrank::cuda {

void report_cuda_error(const char* call, int code, const char* what, const char* file, int line) {
  throw Error(::bitrank::format("CUDA error {} ({}) from {} at {}:{}", code, what, call, file, line));
}

void report_cublas_error(const char* call, int code, const char* file, int line) {
  throw Error(::bitrank::format("cuBLAS error {} ({}) from {} at {}:{}", code,
                          cublasLtGetStatusString(static_cast<cublasStatus_t>(code)), call, file, line));
}

}  // namespace bitrank::cuda
