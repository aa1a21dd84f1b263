"""One training step: to device, autocast, loss, statistics, backward, update."""

import math
from typing import Callable, ContextManager, Optional

import torch
from torch import nn

from slowfast.engine.loop import StepStats
from slowfast.engine.metrics import topk_errors
from slowfast.utils import distributed as du


class TrainStep:
    """``step(batch) -> StepStats`` for :class:`~slowfast.engine.loop.TrainLoop`.

    The model is put back in training mode first when a hook (evaluation,
    precise BN) left it in eval mode.

    The statistics are reduced over processes right after the forward pass,
    so that a non-finite loss skips the update on every process at the same
    iteration, before any gradient all-reduce (the guard hook then stops the
    run).

    Args:
        model: the model (DDP-wrapped when ``world_size > 1``).
        optimizer: its optimizer.
        loss_fn: ``loss_fn(preds, labels)``.
        ctx: this process's run context (device, world size).
        autocast: zero-argument callable giving the forward pass's precision
            context.
        scaler: a GradScaler (fp16 on GPU), or None.
        clip_grad_norm: clip the gradients' L2 norm to this (None or 0: no).
        multi_label: labels are multi-hot (no top-k errors).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable,
        ctx: du.RunContext,
        autocast: Callable[[], ContextManager],
        scaler: Optional[object] = None,
        clip_grad_norm: Optional[float] = None,
        multi_label: bool = False,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.ctx = ctx
        self.device = ctx.device
        self.autocast = autocast
        self.scaler = scaler
        self.clip = clip_grad_norm
        self.multi_label = multi_label

    def prepare(self, batch):
        """The batch's inputs, labels and extras on the device; model in train mode."""
        inputs, labels, _index, extras = batch
        if not self.model.training:  # evaluation and precise BN leave eval mode
            self.model.train()
        inputs = [x.to(self.device, non_blocking=True) for x in inputs]
        return inputs, labels.to(self.device, non_blocking=True), extras

    def __call__(self, batch) -> StepStats:
        """Trains on one ``(inputs, labels, indices, extras)`` batch."""
        inputs, labels, extras = self.prepare(batch)
        with self.autocast():
            preds = self.model(inputs)
            loss = self.loss_fn(preds.float(), labels)
        stats = self.reduce(loss.detach(), preds.detach(), labels, extras["num_failed"])
        if not math.isfinite(stats.loss):
            stats.applied = False
            return stats
        self.optimizer.zero_grad(set_to_none=True)
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        self.update()
        return stats

    def update(self) -> None:
        """Gradient clipping and the optimizer step (through the scaler when fp16)."""
        if self.scaler is not None and self.clip:
            self.scaler.unscale_(self.optimizer)
        if self.clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def reduce(self, loss, preds, labels, num_failed) -> StepStats:
        """Loss and errors averaged, failed videos summed, over processes."""
        if self.multi_label:
            top1, top5 = 0.0, 0.0
        else:
            top1, top5 = topk_errors(preds.float(), labels, (1, 5))
        failed = float(torch.as_tensor(num_failed).sum())
        stats = torch.tensor([loss.item(), top1, top5, failed], dtype=torch.float64)
        if self.ctx.distributed:
            stats = du.all_reduce(stats.to(self.device), "sum")
            stats[:3] /= self.ctx.world_size
        return StepStats(*stats.cpu().tolist())
