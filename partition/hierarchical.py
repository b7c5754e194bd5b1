"""The adaptive hierarchical partitioner: Phase I (METIS) -> II (components) -> III (greedy).

Each phase is tried only if the one before could not meet the edge-load constraint; the
result records which phase produced it and why, so a user can see the decision.  Everything
is deterministic for a given seed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .adjacency import SymmetricAdjacency, symmetric_adjacency
from .components import component_packing
from .errors import PartitionError, check_graph, check_num_parts
from .greedy import greedy_partition
from .isolated import free_nodes
from .loads import LoadModel, imbalance_lower_bound, part_loads
from .loads import imbalance as max_over_mean
from .metis_phase import Attempt, metis_phase, tolerance_ladder

STRATEGIES = ("auto", "metis", "components", "greedy")


@dataclass
class PartitionResult:
    assignment: np.ndarray          # int64 [N]: part of every node
    num_parts: int
    strategy: str                   # the strategy asked for
    phase: str                      # the phase that produced the assignment
    reason: str                     # why that phase (human readable)
    load_imbalance: float           # max/mean of the balanced load
    edge_cut: int                   # directed edges whose endpoints lie in different parts
    seconds: float
    attempts: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"parts": self.num_parts, "strategy": self.strategy, "phase": self.phase,
                "reason": self.reason, "load_imbalance": self.load_imbalance,
                "edge_cut": self.edge_cut, "seconds": self.seconds,
                "attempts": [a.describe() for a in self.attempts]}


def directed_edge_cut(graph, assignment: np.ndarray) -> int:
    return int(np.count_nonzero(assignment[graph.src] != assignment[graph.dst]))


SMALL_GRAPH_ENTRIES = 1_000_000   # adjacency entries (both directions) up to which 4 METIS trials pay


def default_metis_trials(adj: SymmetricAdjacency) -> int:
    """4 independent METIS runs on small graphs, where they are cheap and sometimes find a much
    lower cut (snap_facebook K = 2); 1 on large ones, where extra runs cost their full time
    and, measured on a 1M-edge R-MAT graph at K = 2 and 16, found no lower cut."""
    return 4 if adj.indices.size <= SMALL_GRAPH_ENTRIES else 1


def _check_options(strategy, imbalance_target, max_imbalance, relax_steps):
    if strategy not in STRATEGIES:
        raise PartitionError(f"strategy: must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    for name, value in (("imbalance", imbalance_target), ("max_imbalance", max_imbalance)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 1.0:
            raise PartitionError(f"{name}: must be a number >= 1.0 (max/mean load), got {value!r}")
    if max_imbalance < imbalance_target:
        raise PartitionError(f"max_imbalance: {max_imbalance} is below imbalance {imbalance_target}")
    if isinstance(relax_steps, bool) or not isinstance(relax_steps, int) or relax_steps < 1:
        raise PartitionError(f"relax_steps: must be an integer >= 1, got {relax_steps!r}")


def partition_graph(graph, num_parts: int, *, strategy: str = "auto", imbalance: float = 1.03,
                    max_imbalance: float = 1.10, relax_steps: int = 3, seed: int = 0,
                    metis_trials: Optional[int] = None, load_model: Optional[LoadModel] = None,
                    swap_refinement: bool = False) -> PartitionResult:
    """Split `graph` into `num_parts` parts balancing edge load and minimising the cut.

    imbalance: the constraint (max/mean load) Phase I tries first; max_imbalance: how far
    Phase I may relax it, and the bound Phase II must meet.  `strategy` forces one phase.
    metis_trials: independent METIS runs per attempt (METIS ncuts); the best cut is kept.
    None picks by size (see default_metis_trials).
    swap_refinement: after Phase I's single-move refinement, also swap vertex pairs between
    parts that have no room (swaps.py).  Off by default: on the benchmark graphs it lowered the
    cut by at most 1.2% and cost up to 3 s (docs/partition.md).
    """
    started = time.perf_counter()
    check_graph(graph)
    num_parts = check_num_parts(num_parts)
    _check_options(strategy, imbalance, max_imbalance, relax_steps)
    if metis_trials is not None and (isinstance(metis_trials, bool) or not isinstance(metis_trials, int)
                                     or metis_trials < 1):
        raise PartitionError(f"metis_trials: must be an integer >= 1, got {metis_trials!r}")
    if not isinstance(swap_refinement, bool):
        raise PartitionError(f"swap_refinement: must be True or False, got {swap_refinement!r}")
    model = load_model or LoadModel()
    loads = model.vertex_loads(graph)
    cut = lambda a: directed_edge_cut(graph, a)  # noqa: E731

    def finish(assignment, phase, reason, attempts):
        return PartitionResult(assignment, num_parts, strategy, phase, reason,
                               imbalance_of(assignment), cut(assignment),
                               time.perf_counter() - started, attempts)

    def imbalance_of(assignment):
        return max_over_mean(part_loads(assignment, loads, num_parts))

    n = graph.num_nodes
    if n == 0 or num_parts == 1:
        why = "the graph has no nodes" if n == 0 else "a single part holds every node"
        return finish(np.zeros(n, np.int64), "trivial", why, [])

    adj = symmetric_adjacency(graph)
    ladder = tolerance_ladder(imbalance, max_imbalance, relax_steps)
    if metis_trials is None:
        metis_trials = default_metis_trials(adj)

    if strategy == "metis":
        assignment, attempts = metis_phase(adj, loads, num_parts, ladder=ladder, seed=seed, edge_cut=cut,
                                           trials=metis_trials, free=free_nodes(adj),
                                           swaps=swap_refinement)
        if assignment is None:
            raise PartitionError("strategy metis: METIS met no tolerance up to "
                                 f"{max_imbalance} ({'; '.join(a.describe() for a in attempts)}); "
                                 "use --strategy auto to fall back to the other phases")
        return finish(assignment, "metis", attempts[-1].describe(), attempts)
    if strategy == "components":
        assignment = component_packing(adj, loads, num_parts, tolerance=imbalance, seed=seed)
        return finish(assignment, "components", "forced by strategy", [])
    if strategy == "greedy":
        return finish(greedy_partition(loads, num_parts, seed=seed), "greedy", "forced by strategy", [])
    return _auto(adj, loads, num_parts, ladder, max_imbalance, seed, metis_trials, cut, finish, swap_refinement)


def _auto(adj: SymmetricAdjacency, loads, num_parts, ladder, max_imbalance, seed, metis_trials, cut, finish,
          swap_refinement=False):
    bound = imbalance_lower_bound(loads, num_parts)
    if bound > max_imbalance:
        heaviest = int(np.argmax(loads))
        why = (f"Phases I-II skipped: vertex {heaviest} alone carries load {int(loads[heaviest])}, "
               f"{bound:.3f}x the mean part load, so no partition can meet {max_imbalance:.3f}; "
               "Phase III (greedy) balances as far as that vertex allows")
        return finish(greedy_partition(loads, num_parts, seed=seed), "greedy", why, [])

    assignment, attempts = metis_phase(adj, loads, num_parts, ladder=ladder, seed=seed, edge_cut=cut,
                                       trials=metis_trials, free=free_nodes(adj),
                                           swaps=swap_refinement)
    if assignment is not None:
        return finish(assignment, "metis", "Phase I: " + attempts[-1].describe(), attempts)

    # pack to the strict target; the result is then judged against the relaxed bound
    packed = component_packing(adj, loads, num_parts, tolerance=ladder[0], seed=seed)
    packed_attempt = Attempt("components", "best-fit decreasing", max_imbalance,
                             max_over_mean(part_loads(packed, loads, num_parts)), cut(packed))
    packed_attempt.accepted = packed_attempt.load_imbalance <= max_imbalance + 1e-12
    attempts.append(packed_attempt)
    missed = "; ".join(a.describe() for a in attempts[:-1])
    if packed_attempt.accepted:
        return finish(packed, "components",
                      f"Phase I missed every tolerance ({missed}); Phase II: {packed_attempt.describe()}",
                      attempts)

    greedy = greedy_partition(loads, num_parts, seed=seed)
    greedy_attempt = Attempt("greedy", "largest load first", max_imbalance,
                             max_over_mean(part_loads(greedy, loads, num_parts)), cut(greedy))
    greedy_attempt.accepted = greedy_attempt.load_imbalance <= max_imbalance + 1e-12
    attempts.append(greedy_attempt)
    return finish(greedy, "greedy",
                  f"Phases I-II missed ({missed}; {packed_attempt.describe()}); "
                  f"Phase III: {greedy_attempt.describe()}", attempts)
