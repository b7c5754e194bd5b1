// The dropout stream as the CUDA kernels take it.  The mask is runtime/op_types.h's counter-based
// hash, the same on every backend; what is particular to the GPU is that a replayed CUDA graph
// holds the captured epoch in its kernels' arguments, so the stream of a later epoch is derived
// on the device (device.cuh: epochs_since_capture).
#ifndef MORPHGEN_CUDA_KERNELS_DROPOUT_CUH
#define MORPHGEN_CUDA_KERNELS_DROPOUT_CUH

#include <cstdint>

#include "../device.cuh"
#include "op_types.h"

namespace mg {
namespace cuda {

struct DropStream {
    DropoutKey key;
    uint64_t base;   // stream_base(key): computed on the host, or by at_this_epoch on the device

    MG_HD static DropStream of(DropoutKey key) { return DropStream{key, dropout_detail::stream_base(key)}; }

    // The stream of the epoch the device is in; a kernel asks once per thread, not per element.
    __device__ __forceinline__ DropStream at_this_epoch() const {
        const int64_t later = epochs_since_capture();
        if (later == 0) return *this;
        DropoutKey k = key;
        k.epoch += uint64_t(later);
        return of(k);
    }
};

// An op of map_kernel whose arguments depend on the epoch (a dropout stream, an optimizer's step)
// has at_this_epoch(), which brings them to the epoch the device is in; other ops are used as
// they are.
template <class Op>
__device__ __forceinline__ auto at_this_epoch(const Op &op, int) -> decltype(op.at_this_epoch()) {
    return op.at_this_epoch();
}
template <class Op>
__device__ __forceinline__ Op at_this_epoch(const Op &op, long) {
    return op;
}

}  // namespace cuda
}  // namespace mg
#endif
