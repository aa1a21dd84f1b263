"""Loader capacity: can the loader workers keep up with the model at every shape?

Multigrid keeps an iteration's compute about constant and trades frames and
pixels for clips, so the model consumes up to 8x the base shape's clips per
second at the coarse shapes. Whether the loader keeps up is a matter of
arithmetic, given the loader's cost per clip at each shape (one core; see
``tools/benchmark_loader.py``) and the model's speed:

* the model needs ``batch / iteration time`` clips per second at a shape;
  its iteration time is the measured one, or the base shape's scaled by the
  shape's compute (``batch x frames x crop^2``, multigrid's premise);
* ``workers`` loader processes on their own cores deliver ``workers x 1000 /
  ms per clip`` clips per second;
* when they deliver less, training waits for data: ``1 - delivered /
  needed`` of the time at that shape.
"""

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

CAPACITY_HEADERS = ["shape", "t", "crop", "batch", "model needs clips/s"]
CAPACITY_HEADERS += ["loader clips/s/core", "cores needed", "workers"]
CAPACITY_HEADERS += ["workers give clips/s", "data wait %"]


@dataclass(frozen=True)
class ShapeLoad:
    """One shape's loader cost and the model's speed there.

    Attributes:
        kind: "long k/n" or "short k".
        frames: frames per clip.
        crop: crop size.
        batch: clips per iteration.
        ms_per_clip: loader CPU per clip (one core).
        model_clips_per_s: clips per second the model trains at this shape
            (None: derive it from the base shape's, see ``capacity_rows``).
    """

    kind: str
    frames: int
    crop: int
    batch: int
    ms_per_clip: float
    model_clips_per_s: Optional[float] = None


def model_speed(shape: ShapeLoad, base: ShapeLoad, base_clips_per_s: float) -> float:
    """Clips per second the model needs at ``shape`` when the base shape trains
    at ``base_clips_per_s`` and an iteration's time follows its compute."""
    per_clip = shape.frames * shape.crop**2
    base_per_clip = base.frames * base.crop**2
    return base_clips_per_s * base_per_clip / per_clip


def capacity_rows(
    shapes: Sequence[ShapeLoad],
    base_index: int,
    workers: int,
    base_clips_per_s: Optional[float] = None,
) -> List[list]:
    """Rows of CAPACITY_HEADERS, one per shape.

    Args:
        shapes: the shapes with their loader cost (and, when measured, the
            model's speed).
        base_index: which shape is the base shape.
        workers: loader processes feeding one training process.
        base_clips_per_s: the model's speed at the base shape, for shapes
            without a measured ``model_clips_per_s``.

    Returns:
        list: rows; "cores needed" is needed / per-core clips per second,
        "data wait %" the share of time the model would wait for data.
    """
    base = shapes[base_index]
    rows = []
    for shape in shapes:
        needs = shape.model_clips_per_s
        if needs is None:
            if base_clips_per_s is None:
                raise ValueError(f"{shape.kind}: no model speed measured or given")
            needs = model_speed(shape, base, base_clips_per_s)
        per_core = 1000.0 / shape.ms_per_clip
        gives = workers * per_core
        wait = max(0.0, 1.0 - gives / needs) * 100.0
        row = [shape.kind, shape.frames, shape.crop, shape.batch, needs, per_core]
        rows.append(row + [needs / per_core, workers, gives, wait])
    return rows


def workers_needed(rows: Sequence[list]) -> int:
    """Loader processes that keep every shape free of data wait."""
    return max(math.ceil(row[6] - 1e-9) for row in rows)
