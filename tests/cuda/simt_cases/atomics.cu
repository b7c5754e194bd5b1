// Atomics from many blocks at once (the emulation runs blocks on several OS threads): every
// overload the kernels may use, with the old values they return.
//
//   atomics BLOCK IN OUT_PREFIX   IN: float32 x (one per thread); prints "name value" lines for the
//                                 totals, writes OUT_PREFIX.exch (int32: what each atomicExch
//                                 returned) and OUT_PREFIX.ticket (uint32: each atomicAdd ticket).
#include <cmath>
#include <cstring>
#include <limits>

#include "simt_case.h"

struct Totals {
    int count;
    float fsum;
    double dsum;
    unsigned long long usum;
    int imax, imin;
    unsigned umax;
    long long llmin, llmax;
    int fmax_bits;  // a float maximum through atomicCAS on its bits
    int exch;
    float fexch;
    unsigned ticket;
    unsigned inc;
    unsigned bits;
    int sub;
    unsigned long long ucas;
};

__global__ void hammer(const float *x, int n, Totals *T, int *exch_old, unsigned *tickets) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    const float v = x[i];
    atomicAdd(&T->count, 1);
    atomicAdd(&T->fsum, v);
    atomicAdd(&T->dsum, double(v));
    atomicAdd(&T->usum, (unsigned long long)i * 1000003ull);
    atomicMax(&T->imax, int(v * 1000.0f));
    atomicMin(&T->imin, int(v * 1000.0f));
    atomicMax(&T->umax, unsigned(i));
    atomicMin(&T->llmin, (long long)i - (1ll << 40));
    atomicMax(&T->llmax, (long long)i + (1ll << 40));
    int old = T->fmax_bits, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= v) break;
        old = atomicCAS(&T->fmax_bits, assumed, __float_as_int(v));
    } while (old != assumed);
    exch_old[i] = atomicExch(&T->exch, i);
    atomicExch(&T->fexch, v);
    tickets[i] = atomicAdd(&T->ticket, 1u);
    atomicInc(&T->inc, 99u);
    atomicOr(&T->bits, 1u << (i % 32));
    atomicSub(&T->sub, 2);
    unsigned long long seen = T->ucas, expected;
    do {
        expected = seen;
        seen = atomicCAS(&T->ucas, expected, expected + 1);
    } while (seen != expected);
}

static int host_float_bits(float f) {
    int i;
    std::memcpy(&i, &f, sizeof i);
    return i;
}

static float host_bits_float(int i) {
    float f;
    std::memcpy(&f, &i, sizeof f);
    return f;
}

int main(int argc, char **argv) {
    if (argc != 4) simt_case::fail("usage: atomics BLOCK IN OUT_PREFIX");
    const dim3 block = simt_case::parse_dim(argv[1]);
    const std::vector<float> x = simt_case::read_array<float>(argv[2]);
    const int n = int(x.size());
    const unsigned threads = block.x * block.y * block.z;
    Totals init{};
    init.imax = std::numeric_limits<int>::min();
    init.imin = std::numeric_limits<int>::max();
    init.llmin = std::numeric_limits<long long>::max();
    init.llmax = std::numeric_limits<long long>::min();
    init.fmax_bits = host_float_bits(-INFINITY);
    init.exch = -1;
    init.fexch = -1.0f;
    float *dx = simt_case::to_device(x);
    Totals *dT = simt_case::to_device(std::vector<Totals>{init});
    int *dexch = simt_case::device_zeros<int>(size_t(n));
    unsigned *dtickets = simt_case::device_zeros<unsigned>(size_t(n));
    mg::cuda::launch("hammer", hammer, dim3((unsigned(n) + threads - 1) / threads), block, (const float *)dx, n, dT,
                     dexch, dtickets);
    const Totals T = simt_case::to_host(dT, 1)[0];
    std::printf("count %d\nfsum %.9g\ndsum %.17g\nusum %llu\nimax %d\nimin %d\numax %u\nllmin %lld\nllmax %lld\n",
                T.count, double(T.fsum), T.dsum, T.usum, T.imax, T.imin, T.umax, T.llmin, T.llmax);
    std::printf("fmax %.9g\nexch %d\nfexch %.9g\nticket %u\ninc %u\nbits %u\nsub %d\nucas %llu\n",
                double(host_bits_float(T.fmax_bits)), T.exch, double(T.fexch), T.ticket, T.inc, T.bits, T.sub, T.ucas);
    const std::string prefix = argv[3];
    simt_case::write_array((prefix + ".exch").c_str(), simt_case::to_host(dexch, size_t(n)));
    simt_case::write_array((prefix + ".ticket").c_str(), simt_case::to_host(dtickets, size_t(n)));
    cudaFree(dx);
    cudaFree(dT);
    cudaFree(dexch);
    cudaFree(dtickets);
    return 0;
}
