// A training epoch as a CUDA graph.  Small graphs are launch-bound: an epoch of a few hundred
// short kernels spends much of its time between them.  The first epoch of a context runs kernel
// by kernel (it allocates the scratch arrays and sets up cuBLAS); the second is captured from the
// op layer's stream (device.cuh: stream) into a graph, which that and every later epoch replays
// with one launch.
//
// A replay repeats the captured kernels with their captured arguments, so nothing in an epoch may
// depend on the host beyond what the graph reads itself:
//  * the epoch: the graph's first node copies "epochs since the capture" from pinned host memory
//    into the device (device.cuh: g_epochs_since_capture), from which the dropout streams
//    (kernels/dropout.cuh) and the optimizers' step (kernels/optim.cuh) follow;
//  * the loss: copied on the stream into pinned host memory, read once the epoch has finished
//    (never in the middle of it, where the host would wait for the forward pass);
//  * the kernel timers' counts (calls, bytes, flops): the captured epoch's are added per replay.
// Anything that would synchronise with the device inside the epoch makes the capture fail; the
// epoch then runs kernel by kernel, as does every later one, and the reason is printed once.
// Timed kernels (--profile) and MORPHGEN_CUDA_GRAPHS=0 run kernel by kernel too.
#ifndef MORPHGEN_CUDA_GRAPH_CUH
#define MORPHGEN_CUDA_GRAPH_CUH

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "context.h"
#include "device.cuh"

namespace mg {
namespace cuda {

// MORPHGEN_CUDA_GRAPHS=0 turns the capture off (1 or unset: on).
inline bool graphs_enabled() {
    const char *env = std::getenv("MORPHGEN_CUDA_GRAPHS");
    return !(env && std::strcmp(env, "0") == 0);
}

class EpochGraph {
  public:
    EpochGraph() = default;
    EpochGraph(const EpochGraph &) = delete;
    EpochGraph &operator=(const EpochGraph &) = delete;
    ~EpochGraph() {
        drop();
        if (host_) cudaFreeHost(host_);
    }

    // Runs training epoch `epoch`: `body` enqueues its work (forward, stage_loss, backward, the
    // optimizer step) on the stream.  `capturable`: the program allows a graph (the generated code
    // says; a link-prediction epoch's triples change size).  Returns the staged loss.
    template <class Body>
    float run(int64_t epoch, std::vector<Timer> &timers, bool capturable, Body body) {
        if (!host_) check(cudaMallocHost(&host_, sizeof(Pinned)), "pinned memory for the epoch's loss");
        const bool timed = any_clock(timers);
        if (exec_ && (timed || frees() != frees_at_capture_)) drop();   // stale, or its timers would not run
        if (exec_) {
            host_->since_capture = epoch - captured_epoch_;
            check(cudaGraphLaunch(exec_, stream()), "launching the epoch's CUDA graph");
            for (size_t i = 0; i < timers.size() && i < counted_.size(); ++i) {
                timers[i].calls += counted_[i].calls;
                timers[i].bytes += counted_[i].bytes;
                timers[i].flops += counted_[i].flops;
            }
        } else if (capturable && !timed && !refused_ && eager_epochs_ >= 1 && graphs_enabled()) {
            capture(epoch, timers, body);
        } else {
            eager(body);
        }
        // The epoch ends when its work on the GPU has: its wall time then counts the backward pass
        // and the optimizer step too, as a peer's clock read after torch.cuda.synchronize() does.
        check(cudaStreamSynchronize(stream()), "the epoch");
        return host_->loss;
    }

    // Copies the loss (one float in device memory) to the host once the epoch's work reaches it.
    void stage_loss(const float *device_loss) {
        copy_async(&host_->loss, device_loss, sizeof(float), cudaMemcpyDeviceToHost, "the loss");
    }

    bool replaying() const { return exec_ != nullptr; }

  private:
    struct Pinned {
        float loss;
        int64_t since_capture;
    };

    static bool any_clock(const std::vector<Timer> &timers) {
        for (const Timer &t : timers)
            if (t.clock) return true;
        return false;
    }

    // The epoch's first node: epochs since the capture (0 when run kernel by kernel).
    void set_epoch_offset() {
        check(cudaMemcpyToSymbolAsync(g_epochs_since_capture, &host_->since_capture, sizeof(int64_t), 0,
                                      cudaMemcpyHostToDevice, stream()),
              "the epoch offset");
    }

    template <class Body>
    void eager(Body &body) {
        host_->since_capture = 0;
        set_epoch_offset();
        body();
        ++eager_epochs_;
    }

    template <class Body>
    void capture(int64_t epoch, std::vector<Timer> &timers, Body &body) {
        const std::vector<Timer> before = timers;
        cudaGraph_t graph = nullptr;
        std::string failure;
        check(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeGlobal), "beginning the epoch's capture");
        try {
            host_->since_capture = 0;
            set_epoch_offset();
            body();
        } catch (const std::exception &e) {
            failure = e.what();
        }
        const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
        cudaGetLastError();   // a call refused inside the capture left its error here
        if (failure.empty() && ended != cudaSuccess) failure = cudaGetErrorString(ended);
        if (failure.empty() && graph) {
            const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
            if (made != cudaSuccess) failure = cudaGetErrorString(made), exec_ = nullptr;
        }
        if (graph) cudaGraphDestroy(graph);
        if (!exec_) {                           // nothing ran: the epoch runs kernel by kernel instead
            refused_ = true;
            timers = before;
            std::fprintf(stderr, "morphgen: cuda: epochs are launched kernel by kernel: the epoch could not be "
                                 "captured in a CUDA graph (%s)\n", failure.empty() ? "no graph" : failure.c_str());
            eager(body);
            return;
        }
        // The host went through the epoch once while capturing: its counts are this epoch's, and
        // each replay adds as much.
        counted_.assign(timers.size(), Timer{});
        for (size_t i = 0; i < timers.size(); ++i) {
            counted_[i].calls = timers[i].calls - before[i].calls;
            counted_[i].bytes = timers[i].bytes - before[i].bytes;
            counted_[i].flops = timers[i].flops - before[i].flops;
        }
        captured_epoch_ = epoch;
        frees_at_capture_ = frees();
        check(cudaGraphLaunch(exec_, stream()), "launching the epoch's CUDA graph");
    }

    void drop() {
        if (exec_) cudaGraphExecDestroy(exec_);
        exec_ = nullptr;
    }

    Pinned *host_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    int64_t captured_epoch_ = 0;
    uint64_t frees_at_capture_ = 0;
    int eager_epochs_ = 0;
    bool refused_ = false;
    std::vector<Timer> counted_;   // what one epoch adds to each timer's counts
};

}  // namespace cuda
}  // namespace mg
#endif
