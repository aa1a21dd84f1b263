"""The training step replayed from one CUDA graph per batch shape.

With ``TRAIN.CUDA_GRAPHS True`` the forward pass, the loss and the backward
pass of each batch shape (inputs' shapes and BN splits: about ten in a run
with the default cycles) are captured once in a CUDA graph and replayed at
every later step of that shape, so the host launches one graph instead of
thousands of kernels; the statistics, the check for a non-finite step,
gradient clipping and the optimizer update run eagerly as in
:class:`TrainStep` (``finish``).

What a replay needs, and this class keeps:

* the same tensors: inputs and labels are copied into the graph's own input
  tensors, gradients stay allocated (zeroed, never set to None) and are
  handed back to the parameters should anything have replaced them;
* no host synchronisation inside the captured region (the sub-batch BN
  kernels of ``models/kernels/split_bn.py`` have none), and only the capturing
  thread restricted while it captures (the loader's pin-memory thread keeps
  working);
* BN running statistics and the GPU's random numbers as eager training
  leaves them: capture runs the step twice on a side stream first (CUDA's
  warm-up), and the statistics those two passes updated and the random
  numbers they drew (dropout) are restored afterwards; a replay then draws
  what the eager step would have drawn from the same generator state (the
  graph advances the generator by what it captured);
* each graph's loss and predictions reduced (``finish``) before another
  graph replays: the graphs share one memory pool and are replayed in another
  order than captured, so a later graph may reuse an earlier one's scratch
  memory for its outputs;
* the BN buffers the graphs update still being the model's (precise BN
  copies its statistics into them: ``engine/precise_bn.py``).

On a GPU (``config/validate.py`` says so before the run). With several
processes the gradient all-reduce runs after the replay, outside the graph
(``engine/flat_grads.py``), and BN statistics must be per process
(``launch/preflight.py``). ``tools/dev/check_cuda_graphs.py`` compares the
graphed step with the eager one; which GPU paths have run on a GPU:
docs/guide/mixed-precision.md, "The GPU paths: what has run on a GPU".
"""

import logging
import time
from dataclasses import dataclass
from typing import Dict, List, Tuple

import torch
from torch import nn

from slowfast.engine.flat_grads import FlatGrads
from slowfast.engine.loop import StepStats
from slowfast.engine.step import TrainStep
from slowfast.models.norm import SubBatchNorm3d

logger = logging.getLogger(__name__)

WARMUP_PASSES = 2  # eager passes on a side stream before capture, as CUDA asks


@dataclass
class _Graph:
    """A captured step: the graph and the tensors it reads and writes."""

    graph: "torch.cuda.CUDAGraph"
    inputs: List[torch.Tensor]
    labels: torch.Tensor
    loss: torch.Tensor
    preds: torch.Tensor


class GraphedTrainStep(TrainStep):
    """:class:`TrainStep` with forward and backward replayed from CUDA graphs.

    Takes :class:`TrainStep`'s arguments; the model must be on a CUDA device.
    Under DDP (several processes, or one in a process group) the graphs
    hold the model inside its DistributedDataParallel wrapper (whose
    gradient hooks then stay idle) and the gradients are averaged after
    each replay, outside the graph (``engine/flat_grads.py``); BN statistics
    must then be per process (``launch/preflight.py`` refuses sync groups).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.device.type != "cuda":
            raise ValueError("TRAIN.CUDA_GRAPHS needs a GPU (NUM_GPUS > 0)")
        self.net = self.model.module if self.ctx.distributed else self.model
        self.graphs: Dict[Tuple, _Graph] = {}
        self.pool = torch.cuda.graph_pool_handle()
        self.side = torch.cuda.Stream()  # one: each stream keeps its workspaces
        self.flat = FlatGrads(self.params)
        if self.ctx.distributed:
            logger.info(
                "TRAIN.CUDA_GRAPHS under DDP over %d process(es): forward and backward "
                "replayed from graphs, gradients averaged after each replay in "
                "one all-reduce per dtype (tools/dev/check_cuda_graphs.py compares "
                "it with the eager step; what has run on a GPU: "
                "docs/guide/mixed-precision.md, 'CUDA graphs')",
                self.ctx.world_size,
            )

    def __call__(self, batch) -> StepStats:
        """Trains on one ``(inputs, labels, indices, extras)`` batch."""
        inputs, labels, extras = self.prepare(batch)
        key = (tuple(x.shape for x in inputs), tuple(labels.shape), self._splits())
        if key not in self.graphs:
            start = time.perf_counter()
            self.graphs[key] = self._capture(inputs, labels)
            logger.info(
                "CUDA graph %d captured: inputs %s, %d BN splits, in %.1f s; "
                "%.0f MiB of GPU memory reserved",
                len(self.graphs),
                " + ".join("x".join(map(str, x.shape)) for x in inputs),
                key[2],
                time.perf_counter() - start,
                torch.cuda.memory_reserved(self.device) / 2**20,
            )
        step = self.graphs[key]
        for dst, src in zip(step.inputs, inputs):
            dst.copy_(src, non_blocking=True)
        step.labels.copy_(labels, non_blocking=True)
        self.flat.zero()
        self.buffers.take()
        step.graph.replay()
        self.flat.average(self.ctx.world_size)
        # Statistics first: a later replay may reuse this graph's outputs.
        return self.finish(step.loss, step.preds, labels, extras["num_failed"])

    def _splits(self) -> int:
        """The BN splits the schedule set on the model for this step."""
        for module in self.model.modules():
            if isinstance(module, SubBatchNorm3d):
                return module.num_splits
        return 1

    def _forward_backward(self, inputs, labels):
        with self.autocast():
            preds = self.net(inputs)
            loss = self.loss_fn(preds.float(), labels)
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        return loss.detach(), preds.detach()

    def _capture(self, inputs, labels) -> _Graph:
        """Warms up, then captures the step of these inputs' shape."""
        static_inputs = [x.clone() for x in inputs]
        static_labels = labels.clone()
        saved = _bn_state(self.model)
        rng = torch.cuda.get_rng_state(self.device)
        graph = torch.cuda.CUDAGraph()
        try:
            self.flat.zero()
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                for _ in range(WARMUP_PASSES):
                    self._forward_backward(static_inputs, static_labels)
            torch.cuda.current_stream().wait_stream(self.side)
            self.flat.zero()
            # "thread_local": the loader's pin-memory thread goes on pinning
            # batches (CUDA calls) during the capture; in the default "global"
            # mode any such call from another thread breaks the capture and the
            # thread with it. The warm-up's stream: one set of workspaces.
            with torch.cuda.graph(
                graph,
                pool=self.pool,
                stream=self.side,
                capture_error_mode="thread_local",
            ):
                loss, preds = self._forward_backward(static_inputs, static_labels)
        finally:  # also when a capture fails: the run's state as before it
            torch.cuda.current_stream().wait_stream(self.side)
            _restore_bn_state(self.model, saved)
            torch.cuda.set_rng_state(rng, self.device)
        return _Graph(graph, static_inputs, static_labels, loss, preds)


def _bn_state(model: nn.Module) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """Copies of every BN buffer (running statistics, batches tracked)."""
    return [
        (buffer, buffer.clone())
        for module in model.modules()
        if isinstance(module, nn.modules.batchnorm._NormBase)
        for buffer in module.buffers(recurse=False)
    ]


def _restore_bn_state(model: nn.Module, saved) -> None:
    """Puts back the BN buffers :func:`_bn_state` copied (in place)."""
    with torch.no_grad():
        for buffer, copy in saved:
            buffer.copy_(copy)
