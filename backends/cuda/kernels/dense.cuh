// Dense products of the CUDA backend, row-major as everywhere in morphgen: cuBLAS on a GPU (a
// row-major product is the column-major product of the transposes, so no data is transposed),
// and under the SIMT emulation the host BLAS that the CPU backends link (device memory is host
// memory there).  Hand-written GEMMs are kept for what cuBLAS does not do (typed, gathered rows).
#ifndef MORPHGEN_CUDA_DENSE_CUH
#define MORPHGEN_CUDA_DENSE_CUH

#include <climits>
#include <cstdint>
#include <string>

#include "../device.cuh"

#ifdef __CUDACC__
#include <cublas_v2.h>
#else
#include <cblas.h>
#endif

namespace mg {
namespace cuda {

#ifdef __CUDACC__
inline const char *cublas_status_name(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
        default: return "error";
    }
}
inline cublasHandle_t blas_handle() {
    static cublasHandle_t handle = [] {
        cublasHandle_t h = nullptr;
        cublasStatus_t s = cublasCreate(&h);
        if (s != CUBLAS_STATUS_SUCCESS) throw DeviceError(std::string("cuBLAS: cannot create a handle: ") + cublas_status_name(s));
        s = cublasSetStream(h, stream());   // the op layer's stream, which an epoch's graph captures
        if (s != CUBLAS_STATUS_SUCCESS) throw DeviceError(std::string("cuBLAS: cannot set the stream: ") + cublas_status_name(s));
        return h;
    }();
    return handle;
}
#endif

// C[M, N] = op(A) op(B) with row-major A, B, C (op = transpose when asked); lda/ldb/ldc are the
// row-major leading dimensions.
inline void gemm(const char *name, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        throw DeviceError(std::string(name) + ": a dimension exceeds the 32-bit BLAS interface");
    const float one = 1.f, zero = 0.f;
#ifdef __CUDACC__
    // Row-major C = A B is column-major C^T = B^T A^T.
    const cublasStatus_t s = cublasSgemm(blas_handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, int(N), int(M), int(K), &one, B,
                                         int(ldb), A, int(lda), &zero, C, int(ldc));
    if (s != CUBLAS_STATUS_SUCCESS) throw DeviceError(std::string("cuBLAS error in ") + name + ": " + cublas_status_name(s));
#else
    // on the stream, as cuBLAS's product is: a captured epoch replays it
    check(simt::enqueue(stream(), [=] {
              scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                                int(M), int(N), int(K), one, A, int(lda), B, int(ldb), zero, C, int(ldc));
          }),
          name);
#endif
}

}  // namespace cuda
}  // namespace mg
#endif
