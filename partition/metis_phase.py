"""Phase I: METIS through pymetis, minimising the cut under an edge-load constraint.

Each vertex weighs its load (see loads.py) and METIS is asked for imbalance tolerance t
(its ``ufactor`` is (t - 1) * 1000).  METIS treats the tolerance as a target, not a promise,
so every answer is measured.  An answer that is close (within ``max_imbalance``) is first
repaired to the strict target by moving boundary vertices out of the overloaded parts, then
its cut is refined under that target (refine.py); only when no answer can be brought within a
tolerance is the tolerance relaxed, step by step.  Recursive bisection is tried next to k-way
at each step (bisection is steadier on small, irregular graphs).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pymetis

from .adjacency import SymmetricAdjacency
from .loads import imbalance, part_loads
from .isolated import place_free_nodes
from .quiet import captured_c_stdout
from .refine import refine_cut, repair_balance
from .swaps import refine_with_swaps


@dataclass
class Attempt:
    """One try of one phase: what was run, what came out, and whether it was kept."""
    phase: str                 # "metis" | "components" | "greedy"
    method: str                # e.g. "k-way", "recursive bisection", "best-fit decreasing"
    tolerance: float           # the imbalance the result had to meet
    load_imbalance: Optional[float] = None
    edge_cut: Optional[int] = None
    accepted: bool = False
    note: str = ""

    def describe(self) -> str:
        got = "failed" if self.load_imbalance is None else f"imbalance {self.load_imbalance:.3f}"
        verdict = "met" if self.accepted else "missed"
        text = f"{self.phase} ({self.method}, tolerance {self.tolerance:.3f}): {got}, {verdict}"
        return text + (f" [{self.note}]" if self.note else "")


def ufactor_for(tolerance: float) -> int:
    return max(1, int(round((tolerance - 1.0) * 1000)))


def run_metis(adj: SymmetricAdjacency, num_parts: int, *, vertex_weights: Optional[np.ndarray],
              tolerance: float, recursive: bool, seed: int, trials: int = 1) -> np.ndarray:
    """One pymetis call; returns an int64 assignment.  Raises whatever METIS raises.

    trials: METIS's ncuts, independent partitionings of which METIS keeps the best cut.
    """
    n = adj.num_nodes
    if num_parts == 1 or n == 0:
        return np.zeros(n, np.int64)
    options = pymetis.Options(ufactor=ufactor_for(tolerance), seed=int(seed) & 0x7FFFFFFF,
                              ncuts=max(1, int(trials)))
    # Sorted heavy-edge matching keeps heavily connected neighbourhoods together while coarsening.
    options.ctype = 1
    # METIS prints its diagnostics with C printf; keep them off the user's stdout and pass
    # them on in the error, where the attempt's note records them
    with warnings.catch_warnings(), captured_c_stdout() as metis_output:
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            _, parts = pymetis.part_graph(
                num_parts, adjacency=pymetis.CSRAdjacency(adj.indptr, adj.indices),
                vweights=None if vertex_weights is None else vertex_weights,
                eweights=adj.weights if adj.weights.size else None,
                recursive=recursive, options=options)
        except Exception as exc:
            failure = exc
        else:
            failure = None
    if failure is not None:
        said = f" (METIS said: {metis_output.text})" if metis_output.text else ""
        raise RuntimeError(f"{failure}{said}") from failure
    return np.asarray(parts, dtype=np.int64)


def tolerance_ladder(imbalance_target: float, max_imbalance: float, steps: int) -> list[float]:
    """imbalance_target first, then evenly relaxed up to max_imbalance."""
    if steps <= 1 or max_imbalance <= imbalance_target:
        return [imbalance_target]
    return [float(t) for t in np.linspace(imbalance_target, max_imbalance, steps)]


def metis_phase(adj: SymmetricAdjacency, loads: np.ndarray, num_parts: int, *, ladder: list[float],
                seed: int, edge_cut, trials: int = 4, repair_within: Optional[float] = None,
                methods: tuple = (False, True), free: Optional[np.ndarray] = None,
                swaps: bool = False) -> tuple[Optional[np.ndarray], list[Attempt]]:
    """At each tolerance run k-way and recursive bisection; of those that meet it, keep the
    smaller cut.  The chosen attempt is the last one in the returned list.

    repair_within: a METIS answer whose imbalance is at most this is repaired to the strict
    target ladder[0] and then cut-refined before it is judged (None: ladder[-1]).  Answers
    further off are judged as METIS gave them: repairing those would rebuild the partition
    vertex by vertex, which METIS's multilevel search does better at a looser tolerance.
    methods: recursive flags to try at each tolerance (False = k-way, True = recursive).
    free: mask of nodes without edges (isolated.py); METIS sees them with weight 0 and they are
    placed afterwards, to level the loads.
    swaps: after the single-move refinement, also trade vertices pairwise (swaps.py).
    """
    target = ladder[0]
    metis_weights = loads
    if free is not None and free.any() and not free.all():
        metis_weights = np.where(free, 0, loads)
    else:
        free = None
    repair_within = ladder[-1] if repair_within is None else repair_within
    attempts: list[Attempt] = []
    for tolerance in ladder:
        met: list[tuple[int, int, np.ndarray, Attempt]] = []
        for recursive in methods:
            method = "recursive bisection" if recursive else "k-way"
            attempt = Attempt("metis", method, tolerance)
            attempts.append(attempt)
            try:
                assignment = run_metis(adj, num_parts, vertex_weights=metis_weights, tolerance=tolerance,
                                       recursive=recursive, seed=seed, trials=trials)
            except Exception as exc:  # METIS reports failure as a generic error
                attempt.note = f"METIS error: {exc}"
                continue
            if assignment.shape != loads.shape or (assignment.size and
                                                   (assignment.min() < 0 or assignment.max() >= num_parts)):
                attempt.note = "METIS returned an invalid assignment"
                continue
            if free is not None:
                assignment = place_free_nodes(assignment, loads, free, num_parts)
            raw_imbalance = imbalance(part_loads(assignment, loads, num_parts))
            if raw_imbalance <= repair_within + 1e-12:
                assignment, attempt.note = _repair_and_refine(adj, loads, assignment, num_parts, target,
                                                              raw_imbalance, edge_cut, swaps)
            attempt.load_imbalance = imbalance(part_loads(assignment, loads, num_parts))
            attempt.edge_cut = edge_cut(assignment)
            if attempt.load_imbalance <= tolerance + 1e-12:
                attempt.accepted = True
                met.append((attempt.edge_cut, len(met), assignment, attempt))
        if met:
            _, _, best, chosen = min(met, key=lambda m: (m[0], m[1]))
            attempts.remove(chosen)
            attempts.append(chosen)
            chosen.note = (chosen.note + "; " if chosen.note else "") + "chosen: smallest cut that met"
            return best, attempts
    return None, attempts


def _repair_and_refine(adj, loads, assignment, num_parts, target, raw_imbalance, edge_cut, swaps=False):
    """Bring a near miss within `target`, then lower its cut; returns (assignment, note)."""
    raw_cut = edge_cut(assignment)
    notes = []
    if raw_imbalance > target + 1e-12:
        assignment = repair_balance(adj, loads, assignment, num_parts, bound=target)
        notes.append(f"METIS gave imbalance {raw_imbalance:.3f}, balance repaired")
    refined = refine_cut(adj, loads, assignment, num_parts, bound=target)
    if swaps:
        refined = refine_with_swaps(adj, loads, refined, num_parts, bound=target)
    new_cut = edge_cut(refined)
    notes.append(f"cut {raw_cut} -> {new_cut} after {'repair and ' if notes else ''}refinement")
    return refined, ", ".join(notes)


def vertex_balanced_metis(adj: SymmetricAdjacency, num_parts: int, *, seed: int = 0,
                          tolerance: float = 1.03) -> np.ndarray:
    """The usual reference (as in PyG/DGL): balance vertex counts, ignore edge load.

    Same edge weights as ours, so the only difference is what is balanced.  k-way vs
    recursive follows pymetis's default (recursive for K <= 8).
    """
    return run_metis(adj, num_parts, vertex_weights=None, tolerance=tolerance,
                     recursive=num_parts <= 8, seed=seed)
