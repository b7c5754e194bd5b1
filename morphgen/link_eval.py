"""Filtered ranking of held-out triples (Bordes et al. 2013), as R-GCN and PyG's R-GCN
link-prediction example report it.

For a triple (h, r, t) every node is tried as the tail, (h, r, ?), and as the head, (?, r, t);
candidates that form another true triple (in any split) are removed, and the true node's rank
is the mean of the optimistic and the pessimistic rank among the rest (ties share the middle).
MRR is the mean of 1 / rank over both directions of every triple; Hits@k the fraction ranked k
or better.  Scores are DistMult's: s(h, r, t) = sum_k z[h,k] R[r,k] z[t,k].
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

HITS = (1, 3, 10)
_BATCH = 256          # queries scored at once: 256 x N float32 scores


def _known(triples: np.ndarray) -> tuple:
    tails, heads = defaultdict(list), defaultdict(list)
    for h, r, t in triples.tolist():
        tails[(h, r)].append(t)
        heads[(r, t)].append(h)
    return tails, heads


def _ranks(query: np.ndarray, z: np.ndarray, truth: np.ndarray, filters: list) -> np.ndarray:
    """Rank of ``truth[i]`` among all nodes scored by ``query[i] . z[node]``, filtered."""
    ranks = np.empty(len(truth), np.float64)
    for lo in range(0, len(truth), _BATCH):
        scores = query[lo:lo + _BATCH] @ z.T                    # [batch, N]
        for i in range(scores.shape[0]):
            row, true = scores[i], truth[lo + i]
            target = row[true]
            others = [c for c in filters[lo + i] if c != true]
            if others:
                row[others] = -np.inf
            ranks[lo + i] = ((row > target).sum() + 1 + (row >= target).sum()) / 2.0
    return ranks


def filtered_ranks(z: np.ndarray, rel: np.ndarray, triples: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Filtered ranks of every triple, tail queries then head queries (``2 * len(triples)``)."""
    z = np.asarray(z, np.float64)
    rel = np.asarray(rel, np.float64)
    tails, heads = _known(known)
    h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
    tail_ranks = _ranks(z[h] * rel[r], z, t, [tails[(a, b)] for a, b in zip(h.tolist(), r.tolist())])
    head_ranks = _ranks(z[t] * rel[r], z, h, [heads[(b, c)] for b, c in zip(r.tolist(), t.tolist())])
    return np.concatenate([tail_ranks, head_ranks])


def ranking_metrics(z, rel, triples, known, prefix: str = "") -> dict:
    """``{prefix}mrr`` and ``{prefix}hits@k`` over ``triples`` (empty: no entries)."""
    if len(triples) == 0:
        return {}
    ranks = filtered_ranks(z, rel, triples, known)
    out = {f"{prefix}mrr": float(np.mean(1.0 / ranks))}
    out.update({f"{prefix}hits@{k}": float(np.mean(ranks <= k)) for k in HITS})
    return out


def held_out_metrics(z, rel, triples_by_split: dict, splits=("valid", "test")) -> dict:
    """The ranking metrics of each held-out split (``valid_mrr``, ``test_hits@10``, ...), every
    split's true triples (``triples_by_split``: train, valid and test) filtered from the candidates."""
    known = np.concatenate(list(triples_by_split.values()))
    out = {}
    for split in splits:
        out.update(ranking_metrics(z, rel, triples_by_split[split], known, f"{split}_"))
    return out
