"""Tests of the metric writers: TensorBoard steps across a resume."""

from types import SimpleNamespace

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from slowfast.engine.hooks import TensorBoardWriter
from slowfast.engine.loop import LoopState, StepRecord, StepStats


def _run(log_dir, done_iters, first_epoch, epochs, iters=4):
    """A TensorBoardWriter over ``epochs`` epochs of ``iters`` steps, resumed
    after ``done_iters`` iterations; validation after every epoch."""
    writer = TensorBoardWriter(str(log_dir), done_iters=done_iters)
    state = LoopState(global_iter=done_iters)
    shape = SimpleNamespace(batch_size=2)
    for epoch in range(first_epoch, first_epoch + epochs):
        for it in range(iters):
            stats = StepStats(float(epoch), 0.0, 0.0, 0.0)
            record = StepRecord(epoch, it, state.global_iter, shape, 0.1, 0, 0, stats)
            state.readback.append(record)
            if it % 3 == 2 or it == iters - 1:  # read back every 3 steps
                writer.after_step(state)
                state.readback = []
            state.global_iter += 1
        state.epoch_stats = {"loss": float(epoch)}
        state.val_metrics = {"top1_err": float(epoch)}
        writer.after_epoch(state)
    writer.after_train(state)


def _scalars(log_dir, tag):
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def test_a_resume_keeps_the_resumed_from_epochs_points(tmp_path):
    # Epochs 1-3 logged; the run resumes from epoch 2's checkpoint (8 iterations).
    _run(tmp_path, done_iters=0, first_epoch=0, epochs=3)
    _run(tmp_path, done_iters=8, first_epoch=2, epochs=1)
    assert _scalars(tmp_path, "Val/top1_err") == [(4, 0.0), (8, 1.0), (12, 2.0)]
    loss = _scalars(tmp_path, "Train/loss")
    assert [step for step, _ in loss] == list(range(1, 13))  # none twice
    assert loss[7] == (8, 1.0) and loss[8] == (9, 2.0)
