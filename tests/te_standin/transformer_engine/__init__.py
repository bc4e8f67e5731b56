"""A CPU stand-in for TransformerEngine, for tests only.

It reproduces, in our own code, the weight-gradient behaviour of
TransformerEngine v2.11 (tag v2.11, commit c188b533cc3721ca9c6bbfd26148f5cf60108c25),
the newest release megatron-core 0.16.1 accepts (its ``dev`` extra pins
transformer-engine >=2.9.0a0,<2.12.0):

* ``pytorch/module/_common.py`` ``WeightGradStore``;
* ``pytorch/module/base.py`` ``TransformerEngineBaseModule``:
  ``wgrad_store``, ``register_wgrad_accumulation_and_reduce_hooks``,
  ``need_backward_dw``, ``backward_dw``, ``get_dummy_wgrad``;
* the backward of ``pytorch/module/linear.py`` ``Linear`` and
  ``pytorch/module/layernorm_linear.py`` ``LayerNormLinear`` in bf16/fp32 (no
  FP8, no userbuffers, tensor-parallel size 1): the wgrad GEMM closure
  (accumulate into ``main_grad`` with ``fuse_wgrad_accumulation``, the bias
  gradient fused into the GEMM), ``wgrad_store.put`` when delayed, and what the
  backward hands autograd for the weight (a dummy with megatron's
  ``grad_added_to_main_grad``, else None when fused);
* the ``skip_backward_post_hook`` marking done by the constructors when
  delayed.

Never importable by the test session itself: tests put ``tests/te_standin`` on
``sys.path`` of the processes they spawn only (megatron-core would otherwise
believe TransformerEngine is installed). The source lines each piece follows
are cited at the end of primus_megatron/runtime/te_wgrad.py's docstring.
"""

__version__ = "2.11.0"
