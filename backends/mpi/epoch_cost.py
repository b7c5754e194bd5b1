"""Choose the partition by the epoch time it predicts (``--partitioner auto``).

An edge-load bound trades compute balance against the cut: a tight bound evens out the
aggregation work of the ranks but, on power-law graphs, leaves many more ghost rows to exchange
(docs/partition.md, the trade-off table).  Which side wins depends on the program (how wide the
exchanged values are, how much dense work each owned row carries) and on the machine (how fast
ranks exchange rows against how fast they aggregate), so the bound is chosen per graph, program
and machine, by predicting one epoch on each candidate partition:

    rank p:  aggregations  sum over aggregated values of  passes x width x s_p
             dense work    (owned_p x FLOPs per owned row + local_p x FLOPs per local row) / dense FLOP/s
             halo          sum over exchanged values of  3 x max(rows sent_p, ghosts_p) x width x 4 B / halo B/s
    epoch  = the slowest rank (ranks meet at every exchange)

``s_p`` is measured, not modelled: the SpMM kernel runs once on rank p's own local CSR (its
locality included) at 16 columns with the rank's thread count.  An epoch is a training step
and an evaluation: a forward pass twice, a backward once.  Which values are exchanged and which
products also run on ghost rows is the MPI lowering's own decision (MPIEmitter).  The dense FLOP/s come from
the machine's calibration (morphgen.calibrate) and the halo bandwidth from a two-rank exchange
(halo_bandwidth.py).  The candidates are morphgen's partitioner at the edge-load bounds of
CANDIDATE_BOUNDS and vertex-balanced METIS; the tightest bound wins ties, so the choice is the
fixed 1.03 partition unless another one is predicted faster.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

CANDIDATE_BOUNDS = (1.03, 1.10, 1.25, 1.50)
RELAX = 0.07              # each bound's relaxation room, as the default 1.03 -> 1.10
PROBE_COLUMNS = 16
TIE = 0.05                # a looser candidate must be predicted this much faster to be taken


@dataclass(frozen=True)
class EpochWork:
    """What one epoch of a program does, in the units the model prices.  An epoch is a training
    step and one evaluation (a forward pass), as `morphgen train` runs them."""
    aggregations: tuple       # (width, passes) per aggregation or gather over in-edges
    exchanges: tuple          # widths of the values exchanged: two forward halos and one reverse
    owned_flops_per_row: float    # dense products computed for owned rows
    local_flops_per_row: float    # ... for owned and ghost rows (values each rank completes itself)

    def key(self) -> list:
        return [list(self.aggregations), list(self.exchanges), round(self.owned_flops_per_row),
                round(self.local_flops_per_row)]


def epoch_work(program) -> EpochWork:
    """Read the aggregations, exchanges and dense products of a bound program's forward pass,
    with the MPI lowering's own rule for which values need an exchange (MPIEmitter)."""
    from morphgen.passes.rewrite import concrete
    from .emitter import MPIEmitter
    complete = MPIEmitter(program).ghost_complete_values()
    trained = {prm.value.id for prm in program.params}       # values a gradient flows back into
    aggregations, exchanges, owned_flops, local_flops = [], [], 0.0, 0.0
    for op in program.forward:
        if op.output is not None and any(v.id in trained for v in op.inputs):
            trained.add(op.output.id)
        read = MPIEmitter.source_read(op)
        if read is not None and read.assoc == "node":
            width = concrete(read.width) or 1
            aggregations.append((width, 3 if read.id in trained else 2))   # the backward's transpose
            if read.id not in complete:
                exchanges.append(width)
                complete.add(read.id)
        elif op.opcode in ("linear", "typed_linear") and op.output.assoc == "node":
            flops = 8.0 * (concrete(op.inputs[0].width) or 1) * (concrete(op.output.width) or 1)
            if op.output.id in complete:      # X W twice (training, evaluation), dX and dW once
                local_flops += flops
            else:
                owned_flops += flops
    return EpochWork(tuple(aggregations), tuple(exchanges), owned_flops, local_flops)


@dataclass(frozen=True)
class Prediction:
    candidate: str
    epoch_s: float            # the slowest rank
    aggregate_s: float        # the slowest rank's parts, for the report
    dense_s: float
    halo_s: float
    ghosts: int               # all ranks
    edge_imbalance: float     # largest local edge count / mean


class EpochCostModel:
    def __init__(self, work: EpochWork, threads: int, dense_gflops: float, halo_gbs: float):
        self.work, self.threads = work, threads
        self.dense_flops, self.halo_bytes_per_s = dense_gflops * 1e9, halo_gbs * 1e9

    def key(self) -> list:
        """What the part files of an auto partition depend on beyond the data: the program's work
        and the threads per rank.  Not the measured machine figures: a re-measured calibration
        must not turn a user's --parts-dir into someone else's."""
        return [self.work.key(), self.threads]

    @classmethod
    def for_this_machine(cls, work: EpochWork, threads: int) -> "EpochCostModel":
        from morphgen.calibrate import calibrate
        from .halo_bandwidth import halo_gbs
        return cls(work, threads, calibrate(threads).dense_gflops, halo_gbs())

    def spmm_seconds_per_column(self, lay) -> float:
        """One SpMM over the part's local CSR (owned rows, sources among owned and ghost rows)."""
        from morphgen.calibrate import library
        ffi, lib = library()
        lib.mg_set_threads(int(self.threads))
        indptr = np.ascontiguousarray(lay.indptr, np.int64)
        col = np.ascontiguousarray(lay.indices, np.int64)
        x = np.ones((max(lay.num_local, 1), PROBE_COLUMNS), np.float32)
        y = np.empty((max(lay.num_owned, 1), PROBE_COLUMNS), np.float32)
        ptr = lambda a, t: ffi.cast(t, a.ctypes.data)  # noqa: E731
        seconds = lib.mg_spmm_seconds(8, lay.num_owned, ptr(indptr, "int64_t *"), ptr(col, "int64_t *"),
                                      ptr(x, "float *"), PROBE_COLUMNS, ptr(y, "float *"), 5)
        return float(seconds) / PROBE_COLUMNS

    def predict(self, candidate: str, layouts) -> Prediction:
        ranks = []
        for lay in layouts:
            per_column = self.spmm_seconds_per_column(lay)
            aggregate = sum(width * passes * per_column for width, passes in self.work.aggregations)
            dense = (lay.num_owned * self.work.owned_flops_per_row
                     + lay.num_local * self.work.local_flops_per_row) / self.dense_flops
            rows = max(lay.num_ghosts, int(sum(v.shape[0] for v in lay.send.values())))
            halo = sum(3 * rows * width * 4 for width in self.work.exchanges) / self.halo_bytes_per_s
            ranks.append((aggregate + dense + halo, aggregate, dense, halo))
        slowest = max(ranks)
        edges = [int(lay.indices.shape[0]) for lay in layouts]
        return Prediction(candidate, *slowest, ghosts=sum(lay.num_ghosts for lay in layouts),
                          edge_imbalance=max(edges) / max(1e-9, float(np.mean(edges))))


def candidates(graph, num_parts: int):
    """(name, assignment) of every partition the model compares, tightest bound first."""
    from morphgen.partition import partition_graph, vertex_balanced_reference
    for bound in CANDIDATE_BOUNDS:
        result = partition_graph(graph, num_parts, imbalance=bound, max_imbalance=bound + RELAX)
        yield f"morphgen {bound:.2f}", result.assignment
    yield "metis", vertex_balanced_reference(graph, num_parts)


def choose_partition(graph, num_parts: int, model: EpochCostModel, progress=None):
    """(assignment, how) of the candidate predicted fastest; ``how`` lists every prediction."""
    from morphgen.partition import build_layouts
    best, predictions = None, []
    for name, assignment in candidates(graph, num_parts):
        prediction = model.predict(name, build_layouts(graph, assignment, num_parts))
        predictions.append(prediction)
        if progress:
            progress(prediction)
        if best is None or prediction.epoch_s < (1 - TIE) * best[0].epoch_s:
            best = (prediction, assignment)
    chosen, assignment = best
    how = {"partitioner": "auto", "chosen": chosen.candidate,
           "predictions": [asdict(p) for p in predictions]}
    return assignment, how
