"""Non-local block (Wang et al., 2018) as used by I3D-NL and SlowFast-NL."""

from typing import Optional, Sequence

import torch
from torch import nn

from slowfast.models.norm import NormFactory


class Nonlocal(nn.Module):
    """Space-time self-attention with a residual connection.

    theta, phi and g are 1x1x1 convs to ``dim_inner`` channels (phi and g after
    an optional max-pool); the affinity theta^T phi is normalised by softmax
    (scaled by ``dim_inner ** -0.5``) or divided by the number of positions
    (dot product); the attended g goes through a 1x1x1 conv and BN and is
    added to the input.

    Args:
        dim: input and output channels.
        dim_inner: channels of theta, phi and g.
        pool_size: [T, H, W] max-pool kernel (= stride) on phi and g; all ones
            or None disables it.
        instantiation: "softmax" or "dot_product".
        group: the clip is split into this many consecutive time chunks that
            attend separately (NONLOCAL.GROUP).
        norm: builds the norm layer.
    """

    def __init__(
        self,
        dim: int,
        dim_inner: int,
        pool_size: Optional[Sequence[int]],
        instantiation: str,
        group: int,
        norm: NormFactory,
    ) -> None:
        super().__init__()
        if instantiation not in ("softmax", "dot_product"):
            raise ValueError(
                f"NONLOCAL.INSTANTIATION = {instantiation!r}: must be 'softmax' or "
                "'dot_product'"
            )
        if group < 1:
            raise ValueError(f"NONLOCAL.GROUP = {group}: must be >= 1")
        self.dim_inner = dim_inner
        self.instantiation = instantiation
        self.group = group
        self.conv_theta = nn.Conv3d(dim, dim_inner, kernel_size=1)
        self.conv_phi = nn.Conv3d(dim, dim_inner, kernel_size=1)
        self.conv_g = nn.Conv3d(dim, dim_inner, kernel_size=1)
        self.conv_out = nn.Conv3d(dim_inner, dim, kernel_size=1)
        self.bn = norm(dim)
        # Module.__setattr__ is typed for tensors and modules; any value works.
        self.bn.transform_final_bn = True  # type: ignore[assignment]
        pool_size = tuple(pool_size) if pool_size is not None else (1, 1, 1)
        self.pool: Optional[nn.MaxPool3d]
        if any(k > 1 for k in pool_size):
            self.pool = nn.MaxPool3d(kernel_size=pool_size, stride=pool_size)
        else:
            self.pool = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, t, h, w = x.shape
        g = self.group
        if g > 1:
            if t % g:
                raise ValueError(
                    f"non-local block: {t} frames cannot be split into "
                    f"NONLOCAL.GROUP={g} groups"
                )
            # [N, C, T, H, W] -> [N * G, C, T / G, H, W], consecutive chunks.
            x = x.unflatten(2, (g, t // g)).transpose(1, 2).flatten(0, 1)
        out = x + self._attend(x)
        if g > 1:
            out = out.unflatten(0, (n, g)).transpose(1, 2).flatten(2, 3)
        return out

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        n, _, t, h, w = x.shape
        theta = self.conv_theta(x)
        pooled = self.pool(x) if self.pool is not None else x
        phi = self.conv_phi(pooled)
        g = self.conv_g(pooled)
        theta = theta.reshape(n, self.dim_inner, -1)
        phi = phi.reshape(n, self.dim_inner, -1)
        g = g.reshape(n, self.dim_inner, -1)
        affinity = torch.einsum("nct,ncp->ntp", theta, phi)
        if self.instantiation == "softmax":
            affinity = torch.softmax(affinity * self.dim_inner**-0.5, dim=2)
        else:
            affinity = affinity / affinity.shape[2]
        attended = torch.einsum("ntp,ncp->nct", affinity, g)
        attended = attended.reshape(n, self.dim_inner, t, h, w)
        return self.bn(self.conv_out(attended))
