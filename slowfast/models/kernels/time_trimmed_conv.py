"""A 3D convolution that skips temporal kernel taps that only see zero padding.

Multigrid trains at clips of few frames: at its coarsest shape the I3D stem's
5-frame kernel (padding 2) slides over 2 frames, and the 3-frame kernels of
res3..res5 over 1 frame. The outer taps then multiply nothing but the zero
padding, at every output position. :class:`TimeTrimmedConv3d` drops them:
with ``T`` input frames, a kernel of ``K`` taps (odd, ``padding K // 2``,
temporal stride and dilation 1) is applied as its ``min(K, 2T - 1)`` central
taps with padding ``T - 1``; with 2 frames (and no groups) as one 2D
convolution over the 2 x C frame channels to 2 x C_out (output frame i, input
frame s: tap ``K // 2 - i + s``), which skips the remaining padded products
too. Outputs are the same up to float rounding (the dropped products are
exact zeros), and so are the gradients (the dropped taps' are zero either
way); parameters and state-dict keys are those of ``nn.Conv3d``.

Why: on CPUs oneDNN's 3D kernels handle 2-frame clips poorly, and the
trimmed 3D kernel and its 2D form spare the step that; the 2D form is used at
2 frames only, the one clip length where it pays off
(docs/benchmarks/model-step.md, "TimeTrimmedConv3d and fused sub-batch BN").

While the model is traced (fvcore's FLOP count), the full kernel is applied,
so FLOP counts are those of the convolution as defined (padding included, as
fvcore counts every convolution), independent of these shortcuts.
"""

import torch
from torch import nn

from slowfast.models.kernels.small_map_conv import (
    SmallMapConv3d,
    conv3d,
    cpu_autocast_enabled,
)


def useful_temporal_taps(kernel: int, frames: int) -> int:
    """Returns how many central taps of a temporal kernel can see a frame.

    Args:
        kernel: temporal kernel size (odd, applied with padding kernel // 2).
        frames: frames of the input.

    Returns:
        int: ``min(kernel, 2 * frames - 1)``.
    """
    return min(kernel, 2 * frames - 1)


class TimeTrimmedConv3d(SmallMapConv3d):
    """``nn.Conv3d`` that skips temporal taps seeing only zero padding.

    Same constructor, parameters and state-dict keys as ``nn.Conv3d``. The
    shortcut applies when the temporal kernel is odd, its padding is
    ``kernel // 2``, temporal stride and dilation are 1 and the padding mode
    is ``zeros``; otherwise (and while tracing) this is a plain ``SmallMapConv3d``.
    Its weight gradient on small feature maps is :func:`conv3d`'s.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Convolves ``x`` of shape [N, C, T, H, W].

        Args:
            x: the input.

        Returns:
            torch.Tensor: the same output as ``nn.Conv3d.forward``.
        """
        if torch.jit.is_tracing() or isinstance(self.padding, str):
            # Traced, or "same" / "valid" padding: no shortcut applies.
            return self._conv_forward(x, self.weight, self.bias)
        kernel = self.kernel_size[0]
        frames = x.shape[2]
        taps = useful_temporal_taps(kernel, frames)
        if (
            taps == kernel
            or kernel % 2 == 0
            or self.padding[0] != kernel // 2
            or self.stride[0] != 1
            or self.dilation[0] != 1
            or self.padding_mode != "zeros"
        ):
            if _needs_explicit_time_padding(self, x, kernel):
                return self._padded_conv(x, self.weight, self.padding[0])
            return self._conv_forward(x, self.weight, self.bias)
        if frames == 2 and self.groups == 1 and x.is_contiguous():
            return self._two_frame_conv(x)
        first = (kernel - taps) // 2
        weight = self.weight[:, :, first : first + taps]
        if _needs_explicit_time_padding(self, x, taps):
            return self._padded_conv(x, weight, taps // 2)
        padding = (taps // 2, self.padding[1], self.padding[2])
        return conv3d(
            x, weight, self.bias, self.stride, padding, self.dilation, self.groups
        )

    def _padded_conv(
        self, x: torch.Tensor, weight: torch.Tensor, time_pad: int
    ) -> torch.Tensor:
        """The convolution with the temporal zero padding added to ``x`` first."""
        assert not isinstance(self.padding, str)  # forward() took that case
        x = nn.functional.pad(x, (0, 0, 0, 0, time_pad, time_pad))
        padding = (0, self.padding[1], self.padding[2])
        return nn.functional.conv3d(
            x, weight, self.bias, self.stride, padding, self.dilation, self.groups
        )

    def _two_frame_conv(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution of a 2-frame clip as one 2D convolution.

        Channels (c, s) of the input (a view of [N, C, 2, H, W]) map to
        channels (o, i) of the output (a view as [N, C_out, 2, H', W']) with
        the weight of tap ``K // 2 - i + s``.
        """
        center = self.kernel_size[0] // 2
        out_frames = [
            self.weight[:, :, center : center + 2],  # output frame 0
            self.weight[:, :, center - 1 : center + 1],  # output frame 1
        ]
        weight = torch.stack(out_frames, dim=1).flatten(2, 3).flatten(0, 1)
        bias = None if self.bias is None else self.bias.repeat_interleave(2)
        out = nn.functional.conv2d(
            x.flatten(1, 2),
            weight,
            bias,
            self.stride[1:],
            self.padding[1:],
            self.dilation[1:],
        )
        return out.unflatten(1, (-1, 2))


def _needs_explicit_time_padding(conv: nn.Conv3d, x: torch.Tensor, taps: int) -> bool:
    """Whether ``conv`` must pad time itself to get a right weight gradient.

    oneDNN's bf16 / fp16 3D convolution on CPU (PyTorch 2.13) returns a wrong
    weight gradient (wrong in every tap but the last, often NaN or inf) when
    the temporal kernel, at stride 1 with temporal zero padding, is longer
    than the clip but the clip has more than 1 frame: 3 taps over 2 frames,
    5 taps over 2-4 (measured against float64 in both memory formats; fp32,
    strided kernels, 1 frame and clips at least as long as the kernel are
    right). Multigrid's coarse shapes are such clips, so bf16 autocast
    (TRAIN.MIXED_PRECISION on CPU) trained them to NaN. The same convolution
    of the input padded beforehand, with no temporal padding, is right.
    """
    if x.device.type != "cpu" or not isinstance(conv.padding, tuple):
        return False
    extent = conv.dilation[0] * (taps - 1) + 1
    if not (
        conv.padding[0] > 0
        and conv.padding_mode == "zeros"
        and conv.stride[0] == 1
        and 1 < x.shape[2] < extent
    ):
        return False
    return x.dtype in (torch.bfloat16, torch.float16) or cpu_autocast_enabled()
