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
    uint64_t base;   // stream_base(key), computed once on the host: the stream when no graph replays

    MG_HD static DropStream of(DropoutKey key) { return DropStream{key, dropout_detail::stream_base(key)}; }

    // The stream of the epoch the device is in.
    __device__ __forceinline__ uint64_t now() const {
        const int64_t later = epochs_since_capture();
        if (later == 0) return base;
        DropoutKey k = key;
        k.epoch += uint64_t(later);
        return dropout_detail::stream_base(k);
    }
};

}  // namespace cuda
}  // namespace mg
#endif
