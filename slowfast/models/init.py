"""Weight initialisation as the reference: MSRA convs, unit BN, small FC."""

from torch import nn


def init_weights(
    model: nn.Module, fc_init_std: float = 0.01, zero_init_final_bn: bool = True
) -> None:
    """Initialises every conv, BN and linear layer of ``model`` in place.

    Convs: kaiming normal (fan_out, ReLU gain), zero bias. BN: weight 1 and
    bias 0, except weight 0 on layers flagged ``transform_final_bn`` (the last
    BN of each residual branch and of each non-local block) when
    ``zero_init_final_bn``. Linear: normal(0, ``fc_init_std``), zero bias.

    Args:
        model: the model.
        fc_init_std: std of the classifier weights (MODEL.FC_INIT_STD).
        zero_init_final_bn: RESNET.ZERO_INIT_FINAL_BN.
    """
    for m in model.modules():
        if isinstance(m, nn.Conv3d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            final = getattr(m, "transform_final_bn", False) and zero_init_final_bn
            if m.weight is not None:
                nn.init.constant_(m.weight, 0.0 if final else 1.0)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=fc_init_std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
