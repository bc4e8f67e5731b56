"""Stand-in for TE v2.11 ``pytorch/ops`` (the operation-based API behind megatron-core's
``--use-te-op-fuser`` / ``TEFusedMLP`` / TE activation ops): not reproduced. The class names exist
because megatron-core's extension module names them in annotations at import; building any of
them raises."""


class FusibleOperation:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"the TransformerEngine stand-in does not reproduce transformer_engine.pytorch.ops "
                                  f"({type(self).__name__})")


class Sequential(FusibleOperation):
    pass


class BasicLinear(FusibleOperation):
    pass


class Bias(FusibleOperation):
    pass


class LayerNorm(FusibleOperation):
    pass


class RMSNorm(FusibleOperation):
    pass


class AllReduce(FusibleOperation):
    pass


class ReduceScatter(FusibleOperation):
    pass


class GELU(FusibleOperation):
    pass


class GEGLU(FusibleOperation):
    pass


class SiLU(FusibleOperation):
    pass


class SwiGLU(FusibleOperation):
    pass


class ReLU(FusibleOperation):
    pass


class ReGLU(FusibleOperation):
    pass
