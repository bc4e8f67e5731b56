"""Run megatron-core 0.16.1 on CPU with gloo.

``enable()`` patches the few places where megatron-core assumes CUDA, so that
``parallel_state.initialize_model_parallel`` (gloo), GPTModel built from
``get_gpt_layer_local_spec()`` (forward + backward) and megatron's own
pipeline schedules (1F1B, interleaved) with their ``P2PCommunicator`` work on
CPU across gloo processes.  It is meant for CPU runs only: after ``enable()``
the patched megatron modules allocate on CPU whatever CUDA is present.

How: where a megatron module calls ``torch.cuda.current_device()``,
``torch.cuda.synchronize()`` or ``torch.zeros(..., device="cuda")``, we replace
that module's global name ``torch`` with a thin proxy that answers "cpu"
(nothing changes for the rest of the process).  The CUDA RNG tracker and the
global memory buffer get method patches.  The only process-wide changes are
scoped: a ``Tensor.cuda`` -> identity swap held for the duration of
``LanguageModule.setup_embeddings_and_output_layer`` (tied embeddings with pp>1),
and a ``Tensor.type`` swap (CPU tensors report ``torch.cuda.*Tensor`` names) held
for the duration of the Float16 and Distributed optimizer constructors.

apex's fused weight-gradient kernel (``gradient_accumulation_fusion``) gets a
plain-torch stand-in.

megatron's data-parallel and optimizer stack is covered too:
``DistributedDataParallel`` (grad buffers, bucketed all-reduce /
reduce-scatter over gloo, ``overlap_grad_reduce``), ``finalize_model_grads``,
``get_megatron_optimizer`` (FP32Optimizer, Float16OptimizerWithFloat16Params,
DistributedOptimizer over torch's AdamW), the grad scalers, grad-norm clipping
and ``dist_checkpointing.save``/``load`` (torch_dist), including fixes for
the DistributedOptimizer's torch-AdamW path (no TE/apex: the only path on CPU).

Not covered: other fused kernels, TransformerEngine, CUDA graphs,
``num_distributed_optimizer_instances > 1`` (CUDA streams,
``distributed/distributed_data_parallel.py:230``, ``param_and_grad_buffer.py:417-422,529``),
``nccl_ub`` (``param_and_grad_buffer.py:768``), optimizer CPU offload,
grad/optimizer offload_to_cpu/restore, async and fully-parallel checkpoint
save/load (``dist_checkpointing/strategies/async_utils.py``, ``fully_parallel.py``).

megatron-core 0.16.1 facts behind the patches (file:line in its wheel, under
``megatron/core/``; the comments below cite more):

* Without TE/apex, ``get_megatron_optimizer`` builds torch's optimizers (Adam:
  ``torch.optim.AdamW``, ``optimizer/__init__.py:14-33,360``) and
  ``distrib_optimizer.HAVE_APEX_OR_TE`` is False. That DistributedOptimizer
  path is wrong on any device, and every CPU run takes it:
  ``load_state_dict`` gives every parameter the same AdamW ``step`` tensor
  (``distrib_optimizer.py:820-825``; the next step counts it once per
  parameter: wrong bias correction); ``_set_main_param_and_optimizer_states``
  copies every state key (``:939-940``: KeyError ``step``, or with
  'dp_reshardable' the pre-load local step, kept as a
  LocalNonpersistentObject at ``:1664``) into views of leaf parameters outside
  ``no_grad``; ``state_dict()`` asserts on a fresh optimizer (``:642``), so
  ``sharded_state_dict(is_loading=True)`` fails.
  tests/test_cpu_optimizer_checkpoints.py fails without any one of these fixes.
* megatron's own interleaved schedule gives the non-pipelined result exactly
  on gloo (tests/test_runtime_parity.py), except in a setting that is wrong on GPUs
  too (NVIDIA/Megatron-LM#1450): pp=2 with ``batch_p2p_comm``. The previous
  and next rank are then the same peer, ``_batched_p2p_ops``
  (``pipeline_parallel/p2p_communication.py:16-50``) posts send-to-previous
  before send-to-next while the peer receives from-previous first, and
  activations and gradients of equal shape swap silently. Megatron-LM refuses
  that setting (``megatron/training/arguments.py:573-582`` at core_v0.16.1);
  megatron-core does not. With Megatron-LM's settings (overlapped unbatched p2p,
  ``deallocate_pipeline_outputs``) it frees an output while gloo still sends it:
  ``_patch_p2p_sends`` holds that memory until the send is waited on.
"""

import contextlib
import functools
import importlib
import types

import torch

from .cpu_torch import CPU as _CPU, TorchOnCpu

__all__ = ["enable", "is_enabled"]

_enabled = False

# megatron modules whose global ``torch`` becomes the CPU proxy (and why).
_PROXIED_MODULES = (
    # recv buffers on torch.cuda.current_device() (:313,321), shape exchange (:190-202);
    # torch.cuda.synchronize() after shape exchange and batched p2p (:242,398)
    "megatron.core.pipeline_parallel.p2p_communication",
    # total_num_tokens = torch.zeros([], device="cuda") (:596,983,2138); torch.autocast("cuda")
    # if config.enable_autocast (:417)
    "megatron.core.pipeline_parallel.schedules",
    # GPU-init weights, sequence-parallel reduce-scatter buffer, dummy wgrad on current_device()
    "megatron.core.tensor_parallel.layers",
    # tensor/sequence-parallel gather/scatter outputs allocated on current_device()
    "megatron.core.tensor_parallel.mappings",
    # split/gather helpers allocate on current_device()
    "megatron.core.tensor_parallel.utils",
    # causal / sliding-window masks built with device="cuda" when attention_mask is None (:35,40)
    "megatron.core.transformer.utils",
    # DDP param/grad buffers are torch.zeros(..., device=torch.cuda.current_device()) (:783,800,806)
    "megatron.core.distributed.param_and_grad_buffer",
    # found_inf, _dummy_overflow_buf, _scale_one, FP32Optimizer._scale, the chained loss scale:
    # torch.tensor(device='cuda') (:473,481,485,907,1141)
    "megatron.core.optimizer.optimizer",
    # loss scale, min scale, growth/backoff factors: torch.tensor(device='cuda') (:15,88,91,94)
    "megatron.core.optimizer.grad_scaler",
    # grad-norm and zero-count accumulators: torch.tensor/zeros(device='cuda') (:90,103,115,174,207)
    "megatron.core.optimizer.clip_grads",
    # load_state_dict's placeholder state shards: torch.empty(device=torch.cuda.current_device()) (:791)
    "megatron.core.optimizer.distrib_optimizer",
    # save finalize: verify and failure flags on 'cuda' / torch.cuda.current_device() (:204,252)
    "megatron.core.dist_checkpointing.strategies.state_dict_saver",
    # torch_dist save: preload_tensors calls torch.cuda.synchronize() after its D2H copies (:230)
    "megatron.core.dist_checkpointing.strategies.filesystem_async",
    # MoE: the all-to-all dispatcher copies split sizes to host on a side stream and syncs an event
    "megatron.core.transformer.moe.token_dispatcher",
    "megatron.core.transformer.moe.moe_utils",
    "megatron.core.transformer.moe.router",
    "megatron.core.transformer.moe.experts",
    # RoPE: inv_freq made on current_device() unless use_cpu_initialization (:78), moved there at the
    # first forward (get_emb, :162), and the YaRN/Llama-3 scaling variants' tables (:297)
    "megatron.core.models.common.embeddings.rotary_pos_embedding",
    # RoPE under context parallelism: get_pos_emb_on_this_cp_rank's chunk index is a pinned CPU tensor
    # (rope_utils.py:62-64 at core_v0.16.1; its .cuda() is _patch_rope_context_parallel's)
    "megatron.core.models.common.embeddings.rope_utils",
    # YaRN RoPE (multi-latent attention's default rope_type): its tables made on current_device()
    # unless use_cpu_initialization (:76) and moved there at the first forward (:122, :126), both tags
    "megatron.core.models.common.embeddings.yarn_rotary_pos_embedding",
    # multi-token prediction: its loss tracker made on current_device() (:337 at core_v0.16.1; :374-378 at
    # core_v0.19.0), and roll_tensor's context-parallel boundary exchange (:179)
    "megatron.core.transformer.multi_token_prediction",
)


@functools.lru_cache(maxsize=None)
def transformer_engine_runs_on_cpu() -> bool:
    """Whether the installed TransformerEngine runs its layers on CPU tensors: the tests' stand-in
    (tests/te_standin) does; a real TE does not (TE v2.11 module/base.py asserts "TransformerEngine
    needs CUDA." when a module is built, line 606, and for a CPU input, line 1049), nor does one
    whose CUDA libraries are missing (its import fails). Probed with one tiny Linear (no random
    initialisation: the probe leaves torch's generator as it was)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return False
    try:
        import transformer_engine.pytorch as te

        te.Linear(2, 2, device="cpu", params_dtype=torch.float32, init_method=lambda w: None)(torch.zeros(1, 2))
    except Exception:  # noqa: BLE001 (any failure: not on CPU)
        return False
    return True


def _te_extension() -> tuple:
    """megatron-core's TransformerEngine wrappers, when a TransformerEngine that runs on CPU is
    installed: they pass ``device=torch.cuda.current_device()`` to TE's constructors unless
    --use-cpu-initialization (extensions/transformer_engine.py:305)."""
    return ("megatron.core.extensions.transformer_engine",) if transformer_engine_runs_on_cpu() else ()


def _patch_memory_buffer():
    from megatron.core import utils

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):
        # upstream allocates on torch.cuda.current_device() (attention's baddbmm buffer, the
        # sequence-parallel gathers); same reuse logic, on CPU
        numel = 1
        for dim in tensor_shape:
            numel *= dim
        buf = self.buffer.get((name, dtype))
        if buf is None or buf.numel() < numel:
            with (mem_alloc_context or contextlib.nullcontext)():
                buf = torch.empty(numel, dtype=dtype, device=_CPU, requires_grad=False)
            self.buffer[(name, dtype)] = buf
        return buf[0:numel].view(*tensor_shape)

    utils.GlobalMemoryBuffer.get_tensor = get_tensor


def _patch_rng():
    from megatron.core.tensor_parallel import random

    def add(self, name, seed):
        # upstream snapshots torch.cuda RNG state (tensor_parallel/random.py:217); on CPU only
        # book-keep the seed
        self._is_initialized = True
        if seed in self.seeds_:
            raise Exception(f"seed {seed} already exists")
        if name in self.states_:
            raise Exception(f"cuda rng state {name} already exists")
        self.seeds_.add(seed)
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    def fork(self, name=None):
        # no CUDA generator to swap: code under fork() draws from the CPU default generator
        return contextlib.nullcontext()

    # (model_parallel_cuda_manual_seed's torch.cuda.manual_seed is queued lazily on a CPU build:
    # nothing to patch there)
    random.CudaRNGStatesTracker.add = add
    random.CudaRNGStatesTracker.fork = fork
    # activation recompute (CheckpointFunction) saves/restores the CUDA RNG (:41,72): nothing to do on CPU
    random._get_cuda_rng_state = lambda *args, **kwargs: None
    random._set_cuda_rng_state = lambda *args, **kwargs: None


@contextlib.contextmanager
def _tensor_cuda_is_identity():
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    try:
        yield
    finally:
        torch.Tensor.cuda = original


def _patch_rope_context_parallel():
    """get_pos_emb_on_this_cp_rank moves its chunk index to the GPU (`.cuda(non_blocking=True)`): on CPU
    the index stays where it is. The function is imported by name into the rotary modules, so each
    module's reference is replaced."""
    modules = [importlib.import_module(f"megatron.core.models.common.embeddings.{name}")
               for name in ("rope_utils", "rotary_pos_embedding", "yarn_rotary_pos_embedding")]
    original = modules[0].get_pos_emb_on_this_cp_rank

    @functools.wraps(original)
    def on_cpu(*args, **kwargs):
        with _tensor_cuda_is_identity():
            return original(*args, **kwargs)

    for module in modules:
        if getattr(module, "get_pos_emb_on_this_cp_rank", None) is original:
            module.get_pos_emb_on_this_cp_rank = on_cpu


def _patch_sequence_parallel_norm():
    """Sequence parallelism with the local layer spec: on GPU megatron takes apex's
    FusedLayerNorm, which accepts it and marks its weight and bias
    `sequence_parallel` (so finalize_model_grads all-reduces their gradients over
    the tensor-parallel group); torch's norm, the only one on CPU, refuses it. A
    norm over a sequence shard computes what it computes over the whole sequence
    row by row, so build torch's norm and mark its parameters as apex does."""
    from megatron.core.transformer import torch_norm

    cls = torch_norm.WrappedTorchNorm
    original = cls.__new__

    def __new__(klass, config, hidden_size, *args, **kwargs):
        sp = config.sequence_parallel
        config.sequence_parallel = False
        try:
            norm = original(klass, config, hidden_size, *args, **kwargs)
        finally:
            config.sequence_parallel = sp
        for p in norm.parameters():
            p.sequence_parallel = sp
        return norm

    cls.__new__ = staticmethod(__new__)


def _patch_moe():
    """MoE with the all-to-all dispatcher (besides the stream proxy above)."""
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    # megatron-core 0.16.1 binds te_general_gemm only when TE imports, but its router reads the
    # name in any case (a NameError without TE, on GPU too)
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    original = moe_utils.maybe_move_tensor_to_cpu

    def maybe_move_tensor_to_cpu(tensor, as_numpy=False, record_stream=False):
        # upstream converts split sizes to numpy only when they come from CUDA; CPU tensors stay
        # tensors, which all_to_all_single refuses as split sizes
        if torch.is_tensor(tensor) and tensor.device.type == "cpu":
            return tensor.numpy() if as_numpy else tensor
        return original(tensor, as_numpy=as_numpy, record_stream=record_stream)

    moe_utils.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu
    token_dispatcher.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu  # imported by name there


class _HeldSend:
    """A pending gloo send that keeps the memory it reads until it is waited on (`_patch_p2p_sends`)."""

    def __init__(self, work, tensor: torch.Tensor) -> None:
        self._work, self._held = work, tensor.detach()  # an alias: the storage outlives `tensor.data = ...`

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        self._held = None
        return result

    def __getattr__(self, name):
        return getattr(self._work, name)


def _patch_p2p_sends():
    """megatron's unbatched sends (`_p2p_ops`, p2p_communication.py:54-128 at core_v0.16.1; Megatron-LM's
    interleaved schedule with its default --overlap-p2p-communication) keep the memory they read until
    waited on. gloo's isend reads the tensor's memory in its worker thread until the send completes, while
    megatron's interleaved schedule posts an output's send and at once frees that output's memory
    (deallocate_output_tensor: `out.data = torch.empty(1)`, schedules.py:1497-1522; with Megatron-LM's
    deallocate_pipeline_outputs=True), waiting on the send only before posting the next one. On a GPU that
    is safe (NCCL records the memory on its stream: the caching allocator hands it out again only after the
    send ran); on CPU the memory is free at once and the send may carry whatever is written there next.
    The batched path waits before it returns (p2p_communication.py:355, :386-389)."""
    from megatron.core.pipeline_parallel import p2p_communication as p2p

    original = p2p._p2p_ops
    if getattr(original, "_primus_held", False):
        return

    @functools.wraps(original)
    def _p2p_ops(**kwargs):
        reqs = original(**kwargs)
        for key in ("send_next", "send_prev"):
            if reqs.get(key) is not None:
                reqs[key] = _HeldSend(reqs[key], kwargs[f"tensor_{key}"])
        return reqs

    _p2p_ops._primus_held = True
    p2p._p2p_ops = _p2p_ops


def _patch_tied_embeddings():
    from megatron.core.models.common.language_module.language_module import LanguageModule

    original = LanguageModule.setup_embeddings_and_output_layer

    def setup_embeddings_and_output_layer(self):
        # upstream does weight.data.cuda() before the embedding-group all-reduce (pp>1, tied;
        # language_module.py:244)
        with _tensor_cuda_is_identity():
            return original(self)

    LanguageModule.setup_embeddings_and_output_layer = setup_embeddings_and_output_layer


def _rows(t: torch.Tensor) -> torch.Tensor:
    # the kernels collapse every leading dimension into one (a view)
    return t.view(-1, t.shape[-1]) if t.dim() > 2 else t


def wgrad_gemm_accum_fp32(total_input: torch.Tensor, grad_output: torch.Tensor, main_grad: torch.Tensor) -> None:
    """apex's ``fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32`` on CPU.

    apex (csrc/megatron/fused_weight_gradient_dense_cuda.cu, commit 27017a4a)
    runs one cublasGemmEx: A = input and B = d_output in their own type (fp32,
    fp16 or bf16), C = the fp32 weight gradient with beta = 1, compute type
    fp32. So ``main_grad += grad_output^T @ total_input`` with every product and
    sum in fp32 (a product of two half-precision numbers is exact in fp32), the
    product never rounded to half precision, and no weight-sized temporary.
    Same here: the inputs are widened (activation-sized copies, none for fp32)
    and ``addmm_`` accumulates into the buffer in place."""
    a, g = _rows(total_input), _rows(grad_output)
    main_grad.addmm_(g.t().to(torch.float32), a.to(torch.float32))


def wgrad_gemm_accum_fp16(total_input: torch.Tensor, grad_output: torch.Tensor, main_grad: torch.Tensor) -> None:
    """apex's ``wgrad_gemm_accum_fp16`` on CPU: a half-precision gradient buffer.

    apex (csrc/megatron/fused_weight_gradient_dense_16bit_prec_cuda.cu, commit
    1f203987): cublasGemmEx with C in the buffer's type (fp16 or bf16),
    beta = 1, compute type fp32, so ``grad_output^T @ total_input + main_grad``
    is formed in fp32 and rounded once. The fp32 result is one weight-sized
    temporary here (the GPU kernel keeps it in registers)."""
    a, g = _rows(total_input), _rows(grad_output)
    main_grad.copy_(torch.addmm(main_grad.to(torch.float32), g.t().to(torch.float32), a.to(torch.float32)))


def _patch_grad_accum_fusion():
    """Provide apex's ``fused_weight_gradient_mlp_cuda`` in plain torch, so that
    ``gradient_accumulation_fusion=True`` (weight grads accumulated straight into
    ``main_grad``) works on CPU exactly as the fused kernel does on GPU."""
    from megatron.core.tensor_parallel import layers

    if layers._grad_accum_fusion_available:
        return

    layers.fused_weight_gradient_mlp_cuda = types.SimpleNamespace(
        wgrad_gemm_accum_fp32=wgrad_gemm_accum_fp32, wgrad_gemm_accum_fp16=wgrad_gemm_accum_fp16)
    layers._grad_accum_fusion_available = True


@contextlib.contextmanager
def _cpu_tensors_report_cuda_type_names():
    """While open, ``t.type()`` of a CPU tensor says ``torch.cuda.<X>Tensor``."""
    original = torch.Tensor.type
    had_own = "type" in torch.Tensor.__dict__

    def type_(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None and not kwargs and self.device.type == "cpu":
            return original(self).replace("torch.", "torch.cuda.", 1)
        return original(self, dtype, non_blocking, **kwargs)

    torch.Tensor.type = type_
    try:
        yield
    finally:
        if had_own:
            torch.Tensor.type = original
        else:
            del torch.Tensor.type


def _patch_optimizer_param_type_checks():
    from megatron.core.optimizer import distrib_optimizer, optimizer

    def wrap(original):
        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            # the constructors sort params by param.type() in {'torch.cuda.FloatTensor', ...Half/BFloat16},
            # else TypeError (optimizer.py:671,690; distrib_optimizer.py:361,420,582)
            with _cpu_tensors_report_cuda_type_names():
                original(self, *args, **kwargs)

        return __init__

    for cls in (optimizer.Float16OptimizerWithFloat16Params, distrib_optimizer.DistributedOptimizer):
        cls.__init__ = wrap(cls.__init__)


def _patch_clip_grads():
    from megatron.core import utils
    from megatron.core.optimizer import clip_grads, optimizer

    def clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, use_decoupled_grad=False):
        # upstream asserts grad.type() == 'torch.cuda.FloatTensor' (clip_grads.py:167); same clipping,
        # fp32 checked by dtype
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        attr = "decoupled_grad" if use_decoupled_grad else "grad"
        grads = [getattr(p, attr, None) for p in parameters]
        grads = [utils.to_local_if_dtensor(g).detach() for g in grads if g is not None]
        if not use_decoupled_grad:
            assert all(g.dtype == torch.float32 for g in grads), "main grads must be fp32"
        coeff = max_norm / (total_norm + 1.0e-6)
        if coeff < 1.0:
            for g in grads:
                g.mul_(coeff)

    clip_grads.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32
    optimizer.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32  # imported by name there

    if clip_grads.l2_norm_impl is utils.local_multi_tensor_l2_norm:

        def l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
            # megatron's local fallback returns the norm on device="cuda" (utils.py:1207); same math
            norms = [torch.linalg.vector_norm(t).float() for t in tensor_lists[0]]
            total = torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.zeros([])
            return total.reshape(1), None

        clip_grads.l2_norm_impl = l2_norm


def _patch_distrib_optimizer_torch_adam():
    from megatron.core.optimizer import distrib_optimizer
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    original = DistributedOptimizer.get_parameter_state_dp_zero

    @functools.wraps(original)
    def get_parameter_state_dp_zero(self, use_gloo_comm=True, empty_data=False, return_on_all_ranks=False):
        # its non-gloo branch (used by 'fully_reshardable') moves the CPU shards with
        # send_tensor.cuda() (distrib_optimizer.py:1077,1089); take the gloo branch
        if getattr(self, "data_parallel_group_gloo", None) is not None:
            use_gloo_comm = True
        return original(self, use_gloo_comm=use_gloo_comm, empty_data=empty_data,
                        return_on_all_ranks=return_on_all_ranks)

    DistributedOptimizer.get_parameter_state_dp_zero = get_parameter_state_dp_zero

    original_set = DistributedOptimizer._set_main_param_and_optimizer_states

    @functools.wraps(original_set)
    def _set_main_param_and_optimizer_states(self, model_param, tensors):
        # Without TE/apex the inner optimizer is torch's AdamW, whose per-param state also holds
        # 'step'; load_state_dict restores it from param_groups, while the shards carry none
        # (KeyError) or, with dp_reshardable, the pre-load local value: keep the current one.
        # fp32 main params are views of leaf params, so the in-place copy needs no_grad.
        if not self.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8:
            group_index, group_order = self.model_param_group_index_map[model_param]
            main_param = self.optimizer.param_groups[group_index]["params"][group_order]
            current = self.optimizer.state[main_param]
            tensors = {k: v for k, v in tensors.items() if k != "step"}
            tensors.update({k: v for k, v in current.items() if k not in tensors})
        with torch.no_grad():
            return original_set(self, model_param, tensors)

    DistributedOptimizer._set_main_param_and_optimizer_states = _set_main_param_and_optimizer_states

    original_load = DistributedOptimizer.load_state_dict

    @functools.wraps(original_load)
    def load_state_dict(self, state_dict):
        # Without TE/apex, load_state_dict gives every param's AdamW state the SAME 'step' tensor, so
        # the next step() increments it once per param (wrong bias correction): un-share it.
        result = original_load(self, state_dict)
        for state in self.optimizer.state.values() if self.optimizer is not None else ():
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].clone()
        return result

    DistributedOptimizer.load_state_dict = load_state_dict

    original_sharded = DistributedOptimizer.sharded_state_dict

    @functools.wraps(original_sharded)
    def sharded_state_dict(self, *args, **kwargs):
        # Without TE/apex, state_dict() reads 'step' from the per-param AdamW state and asserts when a
        # fresh optimizer has none; before loading, fill it with megatron's own dummy step (overwritten).
        is_loading = kwargs.get("is_loading", args[1] if len(args) > 1 else False)
        if (is_loading and not distrib_optimizer.HAVE_APEX_OR_TE and not self.is_stub_optimizer
                and len(self.optimizer.state) == 0):
            self._init_optimizer_states_with_dummy_values()
        return original_sharded(self, *args, **kwargs)

    DistributedOptimizer.sharded_state_dict = sharded_state_dict


def _patch_grad_scaler():
    from megatron.core.optimizer import grad_scaler

    def load_state_dict(self, state_dict):
        # upstream moves the saved scale with .cuda(torch.cuda.current_device()) (grad_scaler.py:140)
        self._scale = state_dict["scale"].to(_CPU)
        self._growth_tracker = state_dict["growth_tracker"]
        self._hysteresis_tracker = state_dict["hysteresis_tracker"]

    grad_scaler.DynamicGradScaler.load_state_dict = load_state_dict


def enable(training=False):
    """Patch megatron-core for CPU/gloo. Idempotent; call before building models.
    ``training=True`` also covers Megatron-LM's training loop (``compat.cpu_training``)."""
    global _enabled
    if training:
        from . import cpu_training

        enable()
        cpu_training.enable()
        return
    if _enabled:
        return
    proxy = TorchOnCpu()
    for module_name in _PROXIED_MODULES + _te_extension():
        importlib.import_module(module_name).torch = proxy
    from . import cpu_combined

    cpu_combined.enable(proxy)  # megatron's combined 1F1B step (--overlap-moe-expert-parallel-comm)
    _patch_memory_buffer()
    _patch_p2p_sends()
    _patch_rng()
    _patch_tied_embeddings()
    _patch_rope_context_parallel()
    _patch_sequence_parallel_norm()
    _patch_moe()
    _patch_grad_accum_fusion()
    _patch_optimizer_param_type_checks()
    _patch_clip_grads()
    _patch_grad_scaler()
    _patch_distrib_optimizer_torch_adam()
    _enabled = True


def is_enabled():
    """Whether ``enable()`` has run in this process."""
    return _enabled
