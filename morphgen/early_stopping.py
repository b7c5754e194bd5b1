"""gnn.earlyStopping(patience): the record of the best epoch, and how checkpoints carry it.

Training stops once `patience` epochs have not improved the best validation accuracy, and the
model keeps that epoch's weights.  A run resumed from a checkpoint must decide exactly as the
uninterrupted run would have, so the checkpoint holds the *training* state (the last epoch's
weights and optimizer state, not the best weights put back for use) and this record, packed as
the library's "caller state" (runtime/morphgen_abi.h, mg_set_checkpoint_extra).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .errors import UserError

_FORMAT = 1.0          # the first float of the packed record


def require_validation_nodes(patience: Optional[int], dataset, program_path) -> None:
    """Early stopping selects by validation accuracy: without validation nodes it would keep the
    first epoch's weights whatever training did."""
    val = getattr(dataset, "val_mask", None)
    if patience and val is not None and not np.any(val):
        raise UserError(f"morphgen: error: {program_path} stops early by validation accuracy "
                        f"(gnn.earlyStopping), but dataset '{dataset.name}' has no validation nodes; "
                        f"give a dataset with a validation split or remove gnn.earlyStopping")


class EarlyStopping:
    """Epochs are the library's count of epochs trained (what a checkpoint resumes from), so a
    record saved in one run and loaded in the next compares like with like.  Accuracies are kept
    as float32, the precision the checkpoint stores them in: a resumed run breaks ties as the
    uninterrupted one did."""

    def __init__(self, patience: int):
        self.patience = patience
        self.best_acc = -1.0
        self.best_epoch = 0
        self.best_params: Optional[dict] = None

    def observe(self, epoch: int, val_acc: float, get_params: Callable[[], dict]) -> bool:
        """Record epoch `epoch`'s validation accuracy; True when training should stop after it."""
        acc = float(np.float32(val_acc))
        if acc > self.best_acc:
            self.best_acc, self.best_epoch = acc, epoch
            self.best_params = {k: v.copy() for k, v in get_params().items()}
        return self.exhausted(epoch)

    def exhausted(self, epoch: int) -> bool:
        """Whether `patience` epochs have passed since the best one (a resumed run that had
        already stopped trains no further)."""
        return self.best_params is not None and epoch - self.best_epoch >= self.patience

    # -- the record in a checkpoint -------------------------------------------------------------
    def pack(self, names: list) -> np.ndarray:
        """[format, best epoch, best accuracy, then the best weights in `names` order]."""
        head = np.array([_FORMAT, self.best_epoch, self.best_acc], np.float32)
        if self.best_params is None:
            return head
        return np.concatenate([head] + [self.best_params[n].reshape(-1) for n in names]).astype(np.float32)

    @classmethod
    def unpack(cls, patience: int, packed: np.ndarray, sizes: dict, source) -> "EarlyStopping":
        """The record packed by `pack`; `sizes`: the model's parameter sizes in `pack`'s order."""
        stopper = cls(patience)
        total = sum(sizes.values())
        if packed.size < 3 or packed[0] != _FORMAT or packed.size not in (3, 3 + total) \
                or packed[1] != int(packed[1]) or packed[1] < 0:
            raise UserError(f"morphgen: error: {source}: the early-stopping record in this checkpoint "
                            f"is not one this model wrote")
        stopper.best_epoch, stopper.best_acc = int(packed[1]), float(packed[2])
        if packed.size > 3:
            stopper.best_params, at = {}, 3
            for name, size in sizes.items():
                stopper.best_params[name] = packed[at:at + size].copy()
                at += size
        return stopper


class TrainingRecord:
    """A session's training state beyond what its library holds: the early-stopping record and,
    while the best epoch's weights are in use after training, the last epoch's weights that
    training continues from.  Checkpoints are saved and loaded through it, so that they hold the
    state training continues from and a resumed run equals the uninterrupted one."""

    def __init__(self, session, patience: Optional[int]):
        self.session = session
        self.patience = patience
        self.stopper = EarlyStopping(patience) if patience else None
        self.put_aside: Optional[dict] = None     # the last epoch's weights while the best are in use

    def resume_training(self) -> None:
        """Before more epochs: training continues from the last epoch's weights."""
        if self.put_aside is not None:
            self.session.set_params(self.put_aside)
            self.put_aside = None

    def weights_set_by_caller(self) -> None:
        """Weights set from outside: training continues from them."""
        self.put_aside = None

    def should_stop(self) -> bool:
        return self.stopper is not None and self.stopper.exhausted(self.session.epoch())

    def observe(self, val_acc: float) -> bool:
        """After each epoch (with its validation accuracy): True when training should stop."""
        return self.stopper is not None and self.stopper.observe(self.session.epoch(), val_acc,
                                                                  self.session.get_params)

    def keep_best(self) -> None:
        """After training: the best epoch's weights for use, the last ones put aside."""
        if self.stopper is not None and self.stopper.best_params is not None and self.put_aside is None:
            self.put_aside = self.session.get_params()
            self.session.set_params(self.stopper.best_params)

    def save_checkpoint(self, path) -> None:
        if self.stopper is not None:
            self.session.set_checkpoint_state(self.stopper.pack(self.session.param_names()))
        if self.put_aside is None:
            self.session.save_checkpoint(path)
            return
        in_use = self.session.get_params()
        self.session.set_params(self.put_aside)
        try:
            self.session.save_checkpoint(path)
        finally:
            self.session.set_params(in_use)

    def load_checkpoint(self, path) -> None:
        self.session.load_checkpoint(path)
        self.put_aside = None
        packed = self.session.checkpoint_state()
        if self.patience and packed.size:
            sizes = {name: value.size for name, value in self.session.get_params().items()}
            self.stopper = EarlyStopping.unpack(self.patience, packed, sizes, path)
        elif self.patience:
            self.stopper = EarlyStopping(self.patience)
