#include "bitrank/error.hpp"
#include "cuda/check.hpp"

#include <cusolver_common.h>

namespace bitrank::cuda {

void report_cuda_error(const char* call, int code, const char* what, const char* file, int line) {
  throw Error(::bitrank::format("CUDA error {} ({}) from {} at {}:{}", code, what, call, file, line));
}

void report_cublas_error(const char* call, int code, const char* file, int line) {
  throw Error(::bitrank::format("cuBLAS error {} ({}) from {} at {}:{}", code,
                          cublasLtGetStatusString(static_cast<cublasStatus_t>(code)), call, file, line));
}

namespace {
// cuSOLVER has no status-string function.
const char* cusolver_status_name(int code) {
  switch (static_cast<cusolverStatus_t>(code)) {
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUSOLVER_STATUS_INVALID_VALUE: return "invalid value";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "internal error";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "unknown status";
  }
}
}  // namespace

void report_cusolver_error(const char* call, int code, const char* file, int line) {
  throw Error(::bitrank::format("cuSOLVER error {} ({}) from {} at {}:{}", code, cusolver_status_name(code), call, file, line));
}

}  // namespace bitrank::cuda
