// The part of a morphgen context that every backend shares: the borrowed graph, features,
// labels and masks, the error string, kernel timers, and checkpoint file I/O.
// A generated model derives its own context from mg::ContextBase and adds buffers and weights.
#ifndef MORPHGEN_CONTEXT_H
#define MORPHGEN_CONTEXT_H

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xmmintrin.h>  // _mm_getcsr / _mm_setcsr

namespace mg {

// The error every ABI function turns into a -1 / NaN return and mg_error() text.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A link-prediction loss reads the triples set for the epoch (mg_set_triples); every backend's
// link kernels check that there are some.
inline void require_triples(const int64_t *triples, int64_t count) {
    if (count > 0 && !triples) throw Error("no triples were set (mg_set_triples) for the link-prediction loss");
}

enum class FeatureKind { None, Dense, Csr, Identity };

struct GraphView {
    int64_t num_nodes = 0, num_edges = 0;
    const int64_t *indptr = nullptr, *col = nullptr;                      // CSR over in-edges
    const int64_t *t_indptr = nullptr, *t_col = nullptr, *t_eid = nullptr;  // CSR over out-edges
    const int64_t *etype = nullptr, *ntype = nullptr;                     // optional
    int64_t num_etypes = 1, num_ntypes = 1;
    const float *weight = nullptr;      // optional (mg_set_edge_weights): e.edge_weight
};

struct FeatureView {
    FeatureKind kind = FeatureKind::None;
    int64_t rows = 0, cols = 0;
    const float *dense = nullptr;
    const int64_t *indptr = nullptr;   // CSR when kind == Csr: 64-bit row pointers,
    const int32_t *indices = nullptr;  // 32-bit column indices (scipy's own layout, borrowed as is)
    const float *data = nullptr;
    // A dropout on sparse features is not materialised: the kernels apply the mask of element
    // (r, c) on the fly (p = 0: none). Dense features are dropped into a buffer instead.
    float drop_p = 0.f;
    uint64_t drop_seed = 0, drop_epoch = 0, drop_site = 0;
    const int64_t *drop_row_ids = nullptr;   // row r drops as row drop_row_ids[r] (distributed runs)
    int64_t nnz = 0;                         // stored values of CSR features (readable where indptr is not)
};

// Dropout on the input features keeps their format; every backend shares this decision and
// supplies only the dense drop (drop_dense(values): drop in.dense into values).  Element (r, c)
// has dropout index r*cols + c on both paths, so the dense and the sparse path drop the same
// elements; a sparse dropout is not materialised, the view carries it to the feature kernels.
template <class DropDense>
inline void dropout_feature_view(bool training, const FeatureView &in, FeatureView &out, float *values, float p,
                                 uint64_t seed, uint64_t epoch, uint64_t site, DropDense drop_dense) {
    out = in;
    if (!training || p <= 0.f) return;
    switch (in.kind) {
        case FeatureKind::Dense:
            drop_dense(values);
            out.dense = values;
            break;
        case FeatureKind::Csr:
            if (in.drop_p > 0.f) throw Error("two dropouts on the sparse input features are not supported");
            out.drop_p = p;
            out.drop_seed = seed, out.drop_epoch = epoch, out.drop_site = site;
            break;
        default: throw Error("dropout on featureless (identity) input is not supported");
    }
}

struct Timer {
    double seconds = 0, bytes = 0, flops = 0;
    int64_t calls = 0;
    bool clock = true;        // false: calls, bytes and flops are counted, the time is not read
    void reset() { *this = Timer{0, 0, 0, 0, clock}; }
};

#ifndef MG_DEVICE_TIMERS   // a device backend times its kernels with its own events
// Accumulates wall time of one kernel call into a Timer, with the bytes moved and flops done
// (the analytic counts of that call) so achieved GB/s and GFLOP/s can be reported.
class ScopedTimer {
  public:
    ScopedTimer(Timer &t, double bytes, double flops)
        : t_(t), bytes_(bytes), flops_(flops), start_(t.clock ? std::chrono::steady_clock::now()
                                                             : std::chrono::steady_clock::time_point{}) {}
    ~ScopedTimer() {
        if (t_.clock) t_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        t_.bytes += bytes_;
        t_.flops += flops_;
        t_.calls += 1;
    }

  private:
    Timer &t_;
    double bytes_, flops_;
    std::chrono::steady_clock::time_point start_;
};
#endif

struct ContextBase {
    int threads = 1;
    uint64_t seed = 0;
    int64_t epoch = 0;        // completed training epochs (drives dropout streams, Adam's step)
    std::string error;
    GraphView graph;
    FeatureView features;
    bool features_donated = false;   // the dense feature buffer may be overwritten (see the ABI)
    const int64_t *labels = nullptr;
    const uint8_t *masks[3] = {nullptr, nullptr, nullptr};  // train, val, test
    int64_t mask_count[3] = {0, 0, 0};
    const int64_t *triples = nullptr;   // link prediction: (head, relation, tail, target) rows
    int64_t num_triples = 0;
    bool prepared = false;
    int64_t allocated_bytes = 0;
    std::vector<Timer> timers;
    // The caller's own training state, written into checkpoints after the weights and read back
    // from them (the early-stopping record: mg_set_checkpoint_extra in the ABI).
    std::vector<float> checkpoint_extra;
};

// Subnormal floats off (flush-to-zero, denormals-are-zero) on every OpenMP thread while a call
// into the library runs, restored afterwards so the caller's numerics are untouched. Backward
// passes produce gradients in the subnormal range, and on x86 every FMA that meets one takes a
// microcode assist: measured on the Flickr-shaped graph, the first layer's X^T G went from
// 109 ms to 47 ms per epoch. Values below 1.2e-38 become 0, far below float32 training noise.
class FlushDenormals {
  public:
    FlushDenormals() : saved_(_mm_getcsr()) { set_all(saved_ | kFtzDaz); }
    ~FlushDenormals() { set_all(saved_); }
    FlushDenormals(const FlushDenormals &) = delete;
    FlushDenormals &operator=(const FlushDenormals &) = delete;

  private:
    static constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bits 15 (FTZ) and 6 (DAZ)
    static void set_all(unsigned csr) {
#pragma omp parallel
        _mm_setcsr(csr);
        _mm_setcsr(csr);
    }
    unsigned saved_;
};

// --- checkpoint files: a magic, a format version, then named float arrays ------------------
// Format 02: magic, program fingerprint (u64), epoch (i64), then per array its name (i64 length
// + bytes), its element count (i64) and its float32 values, and last an FNV-1a 64 checksum of
// everything before it.  Written to a temporary file renamed into place, so a crash mid-write
// never leaves a half checkpoint under the name.
// Format 03: magic, program fingerprint, epoch, the run's seed (its dropout masks and negative
// samples; morphgen/outputs.py reads it so that a resumed run keeps it), the arrays, a checksum.
// Format 02 is 03 without the seed, and still loads.
constexpr char kCheckpointMagic[8] = {'M', 'G', 'C', 'K', 'P', 'T', '0', '3'};
constexpr char kCheckpointMagicV2[8] = {'M', 'G', 'C', 'K', 'P', 'T', '0', '2'};
constexpr char kCheckpointMagicV1[8] = {'M', 'G', 'C', 'K', 'P', 'T', '0', '1'};
constexpr int64_t kMaxCheckpointEpoch = int64_t(1) << 40;
constexpr float kMaxCheckpointValue = 1e30f;   // larger weights mean corruption, not training

inline uint64_t fnv1a(const void *p, size_t n, uint64_t h = 1469598103934665603ull) {
    const unsigned char *b = static_cast<const unsigned char *>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

class CheckpointWriter {
  public:
    CheckpointWriter(const char *path, uint64_t fingerprint)
        : path_(path), tmp_(path_ + ".partial-" + std::to_string(getpid())) {
        f_ = std::fopen(tmp_.c_str(), "wb");
        if (!f_) throw Error("cannot open checkpoint for writing: " + path_ + " (" + std::strerror(errno) + ")");
        put(kCheckpointMagic, sizeof kCheckpointMagic);
        put(&fingerprint, sizeof fingerprint);
    }
    ~CheckpointWriter() {
        if (f_) {              // an error before close(): nothing half-written stays behind
            std::fclose(f_);
            std::remove(tmp_.c_str());
        }
    }
    void header(int64_t epoch, uint64_t seed) {
        put(&epoch, sizeof epoch);
        put(&seed, sizeof seed);
    }
    void array(const std::string &name, const float *data, int64_t n) {
        int64_t len = int64_t(name.size());
        put(&len, sizeof len);
        put(name.data(), name.size());
        put(&n, sizeof n);
        put(data, size_t(n) * sizeof(float));
    }
    void close() {
        const uint64_t sum = hash_;
        put(&sum, sizeof sum);
        const bool flushed = std::fflush(f_) == 0 && fsync(fileno(f_)) == 0;
        const bool closed = std::fclose(f_) == 0;
        f_ = nullptr;
        if (!flushed || !closed || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
            const std::string why = std::strerror(errno);
            std::remove(tmp_.c_str());
            throw Error("error writing checkpoint " + path_ + " (" + why + ")");
        }
    }

  private:
    void put(const void *p, size_t n) {
        if (n && std::fwrite(p, 1, n, f_) != n) throw Error("error writing checkpoint " + path_);
        hash_ = fnv1a(p, n, hash_);
    }
    std::string path_, tmp_;
    std::FILE *f_ = nullptr;
    uint64_t hash_ = fnv1a(nullptr, 0);
};

// Reads and verifies a whole checkpoint before anything is taken from it: its size against the
// largest checkpoint this model can have, the checksum, the program fingerprint, then every
// field as it is read (epoch range, array names and sizes, finite values of sane magnitude).
class CheckpointReader {
  public:
    CheckpointReader(const char *path, uint64_t fingerprint, int64_t max_bytes) : path_(path) {
        std::FILE *f = std::fopen(path, "rb");
        if (!f) throw Error("cannot open checkpoint: " + path_ + " (" + std::strerror(errno) + ")");
        struct stat st;
        if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
            std::fclose(f);
            throw Error(path_ + " is not a regular file");
        }
        if (st.st_size > max_bytes) {
            std::fclose(f);
            throw Error(path_ + " is not a checkpoint of this model: " + std::to_string(st.st_size) +
                        " bytes, at most " + std::to_string(max_bytes) + " expected");
        }
        data_.resize(size_t(st.st_size));
        const size_t got = data_.empty() ? 0 : std::fread(data_.data(), 1, data_.size(), f);
        std::fclose(f);
        if (got != data_.size()) throw Error(path_ + ": read error");
        const bool v2 = data_.size() >= sizeof kCheckpointMagicV2 &&
                        std::memcmp(data_.data(), kCheckpointMagicV2, sizeof kCheckpointMagicV2) == 0;
        has_seed_ = !v2;
        if (!v2 && (data_.size() < sizeof kCheckpointMagic ||
                    std::memcmp(data_.data(), kCheckpointMagic, sizeof kCheckpointMagic) != 0)) {
            if (data_.size() >= sizeof kCheckpointMagicV1 &&
                std::memcmp(data_.data(), kCheckpointMagicV1, sizeof kCheckpointMagicV1) == 0)
                throw Error(path_ + " is a morphgen checkpoint of format 01, written before checkpoints carried a "
                                    "checksum and a program fingerprint; it cannot be verified, train again");
            throw Error(path_ + " is not a morphgen checkpoint");
        }
        const size_t header = sizeof kCheckpointMagic + (has_seed_ ? 3 : 2) * sizeof(int64_t), tail = sizeof(uint64_t);
        if (data_.size() < header + tail) throw Error(path_ + ": truncated checkpoint");
        end_ = data_.size() - tail;
        uint64_t stored;
        std::memcpy(&stored, data_.data() + end_, sizeof stored);
        if (stored != fnv1a(data_.data(), end_))
            throw Error(path_ + ": truncated or corrupted checkpoint (checksum mismatch)");
        pos_ = sizeof kCheckpointMagic;
        uint64_t theirs;
        get(&theirs, sizeof theirs);
        if (theirs != fingerprint)
            throw Error(path_ + " is a checkpoint of a different program (its parameters or operations differ "
                                "from this one's)");
    }
    // The header's epoch counter.  The seed behind it (format 03) is passed over: Python reads it
    // before the run starts (morphgen/outputs.py), to keep it or to say that the run changes it.
    int64_t epoch() {
        int64_t v;
        get(&v, sizeof v);
        if (v < 0 || v > kMaxCheckpointEpoch) throw Error(path_ + ": corrupt epoch counter " + std::to_string(v));
        uint64_t seed;
        if (has_seed_) get(&seed, sizeof seed);
        return v;
    }
    void array(const std::string &name, float *data, int64_t n) {
        int64_t len;
        get(&len, sizeof len);
        if (len < 0 || len > 4096) throw Error(path_ + ": corrupt checkpoint");
        std::string got(size_t(len), '\0');
        get(&got[0], size_t(len));
        if (got != name) throw Error(path_ + ": expected array '" + name + "', found '" + got + "'");
        int64_t m;
        get(&m, sizeof m);
        if (m != n)
            throw Error(path_ + ": array '" + name + "' has " + std::to_string(m) + " values, the model needs " +
                        std::to_string(n) + " (checkpoint of a different model or dataset?)");
        get(data, size_t(n) * sizeof(float));
        for (int64_t i = 0; i < n; ++i)
            if (!(std::fabs(data[i]) <= kMaxCheckpointValue))
                throw Error(path_ + ": array '" + name + "' holds " + std::to_string(data[i]) + " at index " +
                            std::to_string(i) + " (not finite or implausibly large: a corrupted checkpoint)");
    }
    // The optional last array (the caller's state), of any size up to max_n values.
    bool at_end() const { return pos_ == end_; }
    std::vector<float> trailing_array(const std::string &name, int64_t max_n) {
        const size_t mark = pos_;   // peek at the count behind the name, then read it as array() does
        int64_t len, m;
        get(&len, sizeof len);
        if (len < 0 || size_t(len) > end_ - pos_) throw Error(path_ + ": corrupt checkpoint");
        pos_ += size_t(len);
        get(&m, sizeof m);
        pos_ = mark;
        if (m < 0 || m > max_n) throw Error(path_ + ": corrupt checkpoint (array of " + std::to_string(m) + " values)");
        std::vector<float> out(static_cast<size_t>(m));
        array(name, out.data(), m);
        return out;
    }
    void expect_end() {
        if (pos_ != end_) throw Error(path_ + ": trailing data (checkpoint of a different model?)");
    }

  private:
    void get(void *p, size_t n) {
        if (n > end_ - pos_) throw Error(path_ + ": truncated checkpoint");
        std::memcpy(p, data_.data() + pos_, n);
        pos_ += n;
    }
    std::string path_;
    std::vector<unsigned char> data_;
    size_t pos_ = 0, end_ = 0;
    bool has_seed_ = true;
};

}  // namespace mg
#endif
