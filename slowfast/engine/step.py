"""One training step: to device, autocast, loss, statistics, backward, update."""

from typing import Callable, ContextManager, Optional

import torch
from torch import nn

from slowfast.engine.loop import StepStats
from slowfast.engine.metrics import topk_error_tensor
from slowfast.engine.nonfinite import BufferSnapshot, grads_finite, skips_on_device
from slowfast.utils import distributed as du


class TrainStep:
    """``step(batch) -> StepStats`` for :class:`~slowfast.engine.loop.TrainLoop`.

    The model is put back in training mode first when a hook (evaluation,
    precise BN) left it in eval mode.

    Nothing in a step makes the host wait for the device: the statistics are
    reduced over processes on the device and returned pending (the loop reads
    them back every LOG_PERIOD steps), and a step whose loss or gradients are
    not finite on any process is skipped on every process: the update is
    skipped and the BN statistics it changed are put back, on the device where
    the optimizer allows it (``engine/nonfinite.py``), else after reading the
    verdict on the host. The guard hook then stops the run, naming the first
    such step.

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
        scaler: Optional[torch.amp.GradScaler] = None,
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
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.buffers = BufferSnapshot(model)
        # Whether an update has been applied (the optimizer's state written).
        self.stepped = False

    def prepare(self, batch):
        """The batch's inputs, labels and extras on the device; model in train mode."""
        inputs, labels, _index, extras = batch
        # Evaluation and precise BN put the bare model in eval mode; a DDP
        # wrapper's own flag stays True, so the bare model's is the one to read.
        net = getattr(self.model, "module", self.model)
        if not (net.training and self.model.training):
            self.model.train()
        inputs = [x.to(self.device, non_blocking=True) for x in inputs]
        return inputs, labels.to(self.device, non_blocking=True), extras

    def __call__(self, batch) -> StepStats:
        """Trains on one ``(inputs, labels, indices, extras)`` batch."""
        inputs, labels, extras = self.prepare(batch)
        self.buffers.take()
        with self.autocast():
            preds = self.model(inputs)
            loss = self.loss_fn(preds.float(), labels)
        self.optimizer.zero_grad(set_to_none=True)
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        return self.finish(loss.detach(), preds.detach(), labels, extras["num_failed"])

    def finish(self, loss, preds, labels, num_failed) -> StepStats:
        """After the backward pass: the statistics, the finite check and the
        update (or its skip), with ``self.buffers`` taken before the forward.

        A step is skipped when its loss or any gradient is not finite; under a
        GradScaler an overflow is the scaler's to handle (it skips the update
        and lowers its scale), so the statistics' verdict, which stops the
        run, checks only the loss. Either way the skipped step leaves the
        weights, the optimizer state and the BN statistics as they were.
        """
        values = self.reduce(loss, preds, labels, num_failed)
        loss_ok = torch.isfinite(values[:1])
        ok = loss_ok & grads_finite(self.params, self.device)
        verdict = loss_ok if self.scaler is not None else ok
        stats = StepStats.pending(torch.cat([values, verdict.double()]))
        if not self.stepped:
            # Until an update has been applied, the verdict is read on the
            # host: a fused optimizer (PyTorch's SGD(fused=True)) creates its
            # state in its first step with empty_like and leaves it unwritten
            # when found_inf (its own or a GradScaler's) skips that step; the
            # next step would fold that memory into the weights.
            self._apply_or_skip_on_host(bool(ok))
        elif skips_on_device(self.optimizer, self.device) or self.scaler is not None:
            self.update(found_inf=None if self.scaler else (~ok).float())
            self.buffers.keep_if(ok)
        else:  # the host reads the verdict (free on a CPU)
            self._apply_or_skip_on_host(bool(ok))
        return stats

    def _apply_or_skip_on_host(self, ok: bool) -> None:
        """Applies the update, or skips it and puts the BN statistics back."""
        if ok:
            self.update()
            self.stepped = True
            return
        self.buffers.restore()
        if self.scaler is not None:  # the scaler lowers its scale all the same
            self.scaler.unscale_(self.optimizer)
            self.scaler.update()

    def update(self, found_inf: Optional[torch.Tensor] = None) -> None:
        """Gradient clipping and the optimizer step (through the scaler when
        fp16; skipped on the device where ``found_inf`` is nonzero)."""
        if self.scaler is not None and self.clip:
            self.scaler.unscale_(self.optimizer)
        if self.clip:
            nn.utils.clip_grad_norm_(self.params, self.clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif found_inf is not None:
            # Read by fused optimizers; torch.optim.Optimizer does not declare it
            # (GradScaler sets it the same way).
            self.optimizer.found_inf = found_inf  # type: ignore[attr-defined]
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf  # type: ignore[attr-defined]
        else:
            self.optimizer.step()

    def reduce(self, loss, preds, labels, num_failed) -> torch.Tensor:
        """Loss and errors averaged, failed videos summed, over processes:
        a float64 tensor on the device, nothing read back."""
        device = loss.device
        if self.multi_label:
            top = torch.zeros(2, dtype=torch.float64, device=device)
        else:
            top = topk_error_tensor(preds.float(), labels, (1, 5))
        # The loader's count is on the host: a fill kernel takes it to the
        # device (a copy from pageable memory may wait for the device).
        # (tolist reads host memory; no tensor op, nothing waits for a device)
        host = num_failed.tolist() if torch.is_tensor(num_failed) else num_failed
        count = float(sum(host) if isinstance(host, list) else host)
        failed = torch.full((1,), count, dtype=torch.float64, device=device)
        values = torch.cat([loss.double().view(1), top, failed])
        if self.ctx.distributed:
            values = du.all_reduce(values, "sum")
            values[:3] /= self.ctx.world_size
        return values
