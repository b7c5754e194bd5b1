// C entry point of bench_elementwise.py: seconds per call of one elementwise kernel.
#include <chrono>
#include <vector>

#include "elementwise.h"
#include "math.h"

extern "C" {

// The best of three timings of `reps` calls; kind 0 scale, 1 relu, 2 relu backward, 3 elu,
// 4 sigmoid, 5 accumulate, 6 copy, 7 tanh, 8 softplus, 9 log.  -1 for an unknown kind.
double mg_elementwise_seconds(int kind, std::int64_t n, int reps) {
    std::vector<float> a(n, 0.5f), b(n, -0.25f), c(n, 1.0f);
    const float *x = a.data(), *y = b.data();
    float* out = c.data();
    auto call = [&] {
        switch (kind) {
            case 0: mg::scale(x, out, n, 0.9f); return true;
            case 1: mg::relu_fwd(x, out, n); return true;
            case 2: mg::relu_bwd(x, y, out, n); return true;
            case 3: mg::elu_fwd(y, out, n, 1.0f); return true;
            case 4: mg::sigmoid_fwd(y, out, n); return true;
            case 5: mg::accumulate(x, out, n); return true;
            case 6: mg::copy_values(x, out, n); return true;
            case 7: mg::tanh_fwd(y, out, n); return true;
            case 8: mg::math_fwd(mg::MathFn::Softplus, 0.0f, y, out, n); return true;
            case 9: mg::math_fwd(mg::MathFn::Log, 0.0f, x, out, n); return true;
            default: return false;
        }
    };
    if (!call()) return -1.0;
    double best = 1e30;
    for (int round = 0; round < 3; ++round) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) call();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        best = s < best ? s : best;
    }
    return best;
}

void mg_set_threads(int n) { omp_set_num_threads(n); }

}  // extern "C"
