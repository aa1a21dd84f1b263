"""Classification head: global average pool per pathway, dropout, linear."""

from typing import List, Sequence

import torch
from torch import nn


class ResNetBasicHead(nn.Module):
    """Pools each pathway over T, H, W (any size), concatenates, classifies.

    At training it returns logits [N, num_classes]; at eval
    (``not self.training``) it applies the activation (softmax or sigmoid).

    Args:
        dim_in: channels of each pathway.
        num_classes: number of outputs.
        dropout_rate: dropout before the classifier (0 disables it).
        act: "softmax", "sigmoid" or "none" (MODEL.HEAD_ACT).
    """

    def __init__(
        self,
        dim_in: Sequence[int],
        num_classes: int,
        dropout_rate: float = 0.0,
        act: str = "softmax",
    ) -> None:
        super().__init__()
        self.num_pathways = len(dim_in)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout_rate) if dropout_rate > 0 else nn.Identity()
        self.projection = nn.Linear(sum(dim_in), num_classes, bias=True)
        self.act: nn.Module
        if act == "softmax":
            self.act = nn.Softmax(dim=1)
        elif act == "sigmoid":
            self.act = nn.Sigmoid()
        elif act == "none":
            self.act = nn.Identity()
        else:
            raise ValueError(
                f"MODEL.HEAD_ACT = {act!r}: must be one of ['softmax', 'sigmoid', "
                "'none']"
            )

    def forward(self, x: List[torch.Tensor]) -> torch.Tensor:
        if len(x) != self.num_pathways:
            raise ValueError(
                f"head: expected {self.num_pathways} pathways, got {len(x)}"
            )
        pooled = torch.cat([self.pool(t).flatten(1) for t in x], dim=1)
        out = self.projection(self.dropout(pooled))
        if not self.training:
            out = self.act(out)
        return out
