"""Single-process reference for pipeline tests on a tiny megatron-core GPTModel.

Not a test file: tests import it.  Everything runs on CPU in fp32
(call ``primus_megatron.compat.cpu.enable()`` first; ``init_single_process``
does).

How megatron-core 0.16.1 decides which layers a (virtual) pipeline stage holds
------------------------------------------------------------------------------
* ``TransformerBlock.__init__`` (transformer/transformer_block.py) builds
  ``get_num_layers_to_build(config, vp_stage, pp_rank)`` layers; ``pp_rank`` is
  the rank in ``pg_collection.pp`` (default: parallel_state's pp group).
  Even split: ``num_layers // config.pipeline_model_parallel_size`` per rank,
  further ``// virtual_pipeline_model_parallel_size`` per chunk.
  ``num_layers_in_first/last_pipeline_stage`` (uneven split),
  ``account_for_embedding/loss_in_pipeline_split`` (embedding/loss count as a
  layer) and ``pipeline_model_parallel_layout`` change that.
* The first global layer of a chunk is ``get_transformer_layer_offset(config,
  vp_stage, pp_rank)`` (transformer/transformer_layer.py).  Even split, with
  vp: ``vp_stage * (num_layers // vp) + pp_rank * (num_layers // pp // vp)``,
  i.e. Megatron's loop placement ``stage = vp_stage * pp + pp_rank``.  Example,
  8 layers, pp=2, vp=2: rank 0 holds layers [1,2] (vp 0) and [5,6] (vp 1),
  rank 1 holds [3,4] and [7,8].  No formula gives a V placement; with a
  ``pipeline_model_parallel_layout`` the offset is the layout's and its pp rank
  comes from parallel_state, not from pg_collection.
* ``TransformerLayer.__init__`` receives the LOCAL 1-based index and sets
  ``self.layer_number = local + get_transformer_layer_offset(...)``: the GLOBAL
  1-based layer number.  Parameter names stay local
  (``decoder.layers.<local 0-based index>...``), so weights and grads are
  mapped through ``layer.layer_number``, never through names.
* ``GPTModel(pre_process, post_process, vp_stage)``: pre_process builds the
  embedding, post_process the final layernorm (when there is no MTP) and the
  output layer.  Megatron-LM sets pre_process/post_process from
  ``parallel_state.is_pipeline_first_stage/last_stage(ignore_virtual=False,
  vp_stage=i)`` for each chunk i.
* Tied embeddings (``share_embeddings_and_output_weights``) with pp>1: the last
  stage owns a copy ``output_layer.weight``, zeroed and all-reduced over the
  embedding group at construction; its grad must be summed with the first
  stage's ``embedding.word_embeddings.weight`` grad (megatron does that in
  ``finalize_model_grads``; here ``gather`` callers sum duplicates).

Global parameter names used here are the full (pp=1) model's names:
``decoder.layers.<layer_number - 1>.<rest>``; a tied ``output_layer.weight`` is
named ``embedding.word_embeddings.weight``.
"""

import contextlib
import datetime
from functools import partial

import torch


VOCAB_SIZE = 128
SEQ_LENGTH = 16
MICRO_BATCH_SIZE = 2


def _enable_cpu():
    from primus_megatron.compat import cpu

    cpu.enable()


def init_single_process(timeout_s=60):
    """World of one gloo process with parallel_state (tp=pp=1); no-op if already set up."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    _enable_cpu()
    if not dist.is_initialized():
        # a world of one needs no rendezvous port (a picked-then-closed one could be taken meanwhile)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=timeout_s))
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1, distributed_timeout_minutes=1)


def tiny_gpt_config(
    num_layers,
    hidden=32,
    heads=4,
    *,
    pipeline_model_parallel_size=1,
    virtual_pipeline_model_parallel_size=None,
    **overrides,
):
    """fp32, dropout-free, CPU-initialised TransformerConfig for a tiny GPT (MLATransformerConfig
    with `multi_latent_attention`, as Megatron-LM picks it)."""
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    kwargs = dict(
        num_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=4 * hidden,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        pipeline_dtype=torch.float32,
        bf16=False,
        fp16=False,
        gradient_accumulation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=virtual_pipeline_model_parallel_size,
    )
    kwargs.update(overrides)
    return (MLATransformerConfig if kwargs.get("multi_latent_attention") else TransformerConfig)(**kwargs)


def _gpt(config, *, pre_process, post_process, vp_stage=None, tied=False):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    _enable_cpu()
    layer_spec = get_gpt_layer_local_spec()
    return GPTModel(
        config,
        layer_spec,
        vocab_size=VOCAB_SIZE,
        max_sequence_length=SEQ_LENGTH,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=tied,
        vp_stage=vp_stage,
        mtp_block_spec=mtp_block_spec(config, layer_spec, vp_stage),
    )


def mtp_block_spec(config, layer_spec, vp_stage=None, *, use_transformer_engine=False):
    """The MTP block of a chunk, as Megatron-LM's gpt_builders asks megatron-core for it
    (`get_gpt_mtp_block_spec`: None where the chunk holds no MTP layer)."""
    if not getattr(config, "mtp_num_layers", None):
        return None
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

    return get_gpt_mtp_block_spec(config, layer_spec, use_transformer_engine=use_transformer_engine, vp_stage=vp_stage)


@contextlib.contextmanager
def whole_pipeline():
    """parallel_state answering as a pipeline of one rank (and no virtual pipeline) while the whole
    model (pp = 1) is built in a pipelined process: megatron-core places the MTP layers by asking it
    whether this is the last stage (get_mtp_num_layers_to_build; core_v0.19.0's GPTModel also asks
    mtp_on_this_rank), which only the last pipeline rank would be."""
    from megatron.core import parallel_state as ps

    saved = (getattr(ps, "_MPU_PIPELINE_MODEL_PARALLEL_WORLD_SIZE", None),
             getattr(ps, "_MPU_PIPELINE_MODEL_PARALLEL_RANK", None), ps.get_virtual_pipeline_model_parallel_world_size())
    ps.set_pipeline_model_parallel_world_size(1)
    ps.set_pipeline_model_parallel_rank(0)
    ps.set_virtual_pipeline_model_parallel_world_size(None)
    try:
        yield
    finally:
        ps.set_pipeline_model_parallel_world_size(saved[0])
        ps.set_pipeline_model_parallel_rank(saved[1])
        ps.set_virtual_pipeline_model_parallel_world_size(saved[2])


def deterministic_init_(model, seed=1234):
    """Overwrite every parameter from a private generator (independent of megatron's init).

    Every tensor gets distinct values (layernorm weights around 1, biases around
    0), so a layer placed at the wrong global position cannot go unnoticed.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            if param.dim() >= 2:
                value = 0.02 * noise
            elif "norm" in name and name.endswith("weight"):
                value = 1.0 + 0.1 * noise
            else:
                value = 0.02 * noise
            param.copy_(value.to(param.dtype))
    return model


def build_full_model(num_layers=4, *, seed=1234, tied=False, **config_overrides):
    """The non-pipelined reference GPTModel (pp=1, all layers) with deterministic weights.

    Needs torch.distributed + parallel_state initialised (any pp size: the
    model's own config says pp=1), e.g. by ``init_single_process()``.
    """
    config = tiny_gpt_config(num_layers, **config_overrides)
    with whole_pipeline():
        model = _gpt(config, pre_process=True, post_process=True, tied=tied)
    return deterministic_init_(model, seed)


def build_pipeline_chunks(num_layers, *, tied=False, **config_overrides):
    """This rank's model chunks as Megatron-LM builds them (one per virtual stage).

    Reads pp/vp sizes and this rank's pp rank from parallel_state.
    """
    from megatron.core import parallel_state as ps

    pp = ps.get_pipeline_model_parallel_world_size()
    vp = ps.get_virtual_pipeline_model_parallel_world_size()
    config = tiny_gpt_config(
        num_layers,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp,
        **config_overrides,
    )
    chunks = []
    for vp_stage in range(vp or 1):
        stage = None if vp is None else vp_stage
        chunks.append(
            _gpt(
                config,
                pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
                post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
                vp_stage=stage,
                tied=tied,
            )
        )
    return chunks


def unwrap(model):
    """Strip wrappers that keep the real module in ``.module`` (DDP, Float16Module)."""
    while hasattr(model, "module"):
        model = model.module
    return model


def layer_numbers(chunk):
    """Global 1-based layer numbers held by a chunk, in order."""
    return [layer.layer_number for layer in unwrap(chunk).decoder.layers]


def global_param_name(chunk, local_name):
    """The full model's name for parameter ``local_name`` of a pipeline chunk."""
    chunk = unwrap(chunk)
    parts = local_name.split(".")
    if parts[:2] == ["decoder", "layers"]:
        layer = chunk.decoder.layers[int(parts[2])]
        return ".".join(["decoder", "layers", str(layer.layer_number - 1)] + parts[3:])
    if local_name == "output_layer.weight" and chunk.share_embeddings_and_output_weights:
        return "embedding.word_embeddings.weight"
    return local_name


def named_global_parameters(chunk):
    """(global name, parameter) for every parameter of a (possibly wrapped) chunk."""
    inner = unwrap(chunk)
    for name, param in inner.named_parameters():
        yield global_param_name(inner, name), param


def copy_weights_by_layer_number(full_model, chunk):
    """Load a pipeline chunk from the full model, matching layers by global layer number.

    Returns the global names that were copied.
    """
    source = dict(unwrap(full_model).named_parameters())
    copied = []
    with torch.no_grad():
        for name, param in named_global_parameters(chunk):
            if name not in source:
                raise KeyError(f"chunk parameter {name!r} has no counterpart in the full model")
            if source[name].shape != param.shape:
                raise ValueError(f"{name}: shape {tuple(param.shape)} != {tuple(source[name].shape)}")
            param.copy_(source[name])
            copied.append(name)
    return copied


def make_microbatches(
    num_microbatches,
    *,
    micro_batch_size=MICRO_BATCH_SIZE,
    seq_length=SEQ_LENGTH,
    vocab_size=VOCAB_SIZE,
    seed=0,
):
    """Deterministic GPT microbatches in the layout Megatron-LM's pretrain_gpt feeds.

    tokens/labels/position_ids [b, s] int64; loss_mask [b, s] float with some
    zeros; attention_mask [1, 1, s, s] bool, True = masked (causal).
    """
    gen = torch.Generator().manual_seed(seed)
    causal = torch.triu(torch.ones(seq_length, seq_length, dtype=torch.bool), diagonal=1)
    batches = []
    for _ in range(num_microbatches):
        tokens = torch.randint(0, vocab_size, (micro_batch_size, seq_length + 1), generator=gen)
        loss_mask = (torch.rand(micro_batch_size, seq_length, generator=gen) > 0.15).float()
        loss_mask[:, 0] = 1.0  # never an all-masked sample
        batches.append(
            {
                "tokens": tokens[:, :-1].contiguous(),
                "labels": tokens[:, 1:].contiguous(),
                "loss_mask": loss_mask,
                "position_ids": torch.arange(seq_length).repeat(micro_batch_size, 1),
                "attention_mask": causal.view(1, 1, seq_length, seq_length).clone(),
            }
        )
    return batches


def data_iterators(microbatches, num_chunks=1):
    """One iterator per model chunk (megatron's interleaved schedule wants a list)."""
    its = [iter(list(microbatches)) for _ in range(num_chunks)]
    return its if num_chunks > 1 else its[0]


def loss_func(loss_mask, output_tensor, *, three_tuple=True):
    """Megatron's loss_func contract; output_tensor is GPTModel's per-token loss [b, s].

    three_tuple: (masked loss sum, num_tokens, {"lm loss": [sum, num_tokens]}) and
    the schedule divides by num_tokens and num_microbatches;
    otherwise (masked mean, {"lm loss": mean}) and the schedule divides by
    num_microbatches.
    """
    losses = output_tensor.float().view(-1)
    mask = loss_mask.view(-1).float()
    loss_sum = torch.sum(losses * mask)
    num_tokens = mask.sum().to(torch.int)
    if three_tuple:
        report = torch.cat([loss_sum.detach().view(1), num_tokens.float().view(1)])
        return loss_sum, num_tokens, {"lm loss": report}
    loss = loss_sum / num_tokens.clamp(min=1)
    # clone: the schedule divides the returned loss in place by num_microbatches
    return loss, {"lm loss": loss.detach().clone()}


def forward_step_func(data_iterator, model, return_schedule_plan=False, *, three_tuple=True):
    """Megatron's forward_step contract: returns (output_tensor, loss_func); with
    `return_schedule_plan` (megatron's combined 1F1B step asks for it, combined_1f1b.py:341-344 at
    core_v0.16.1) the model's schedule plan in place of the output, as Megatron-LM's pretrain_gpt
    forward_step builds it (pretrain_gpt.py:189-195). A packed microbatch for TransformerEngine
    layers carries `packed_seq_params` (thd; its attention_mask is None)."""
    batch = next(data_iterator)
    extra = {"packed_seq_params": batch["packed_seq_params"]} if batch.get("packed_seq_params") else {}
    run = model.build_schedule_plan if return_schedule_plan else model
    output = run(
        batch["tokens"],
        batch["position_ids"],
        batch["attention_mask"],
        labels=batch["labels"],
        **extra,
    )
    return output, partial(loss_func, batch["loss_mask"], three_tuple=three_tuple)


def make_forward_step_func(three_tuple=True):
    """forward_step_func using the 3-tuple (default) or the legacy 2-tuple loss_func."""
    return partial(forward_step_func, three_tuple=three_tuple)


def losses_from_store(forward_data_store):
    """Per-microbatch mean losses from a schedule's returned list of loss dicts."""
    out = []
    for item in forward_data_store:
        value = item["lm loss"]
        out.append(float(value[0] / value[1]) if value.numel() == 2 else float(value))
    return out


# What megatron-core's parallel linear layers call at every forward (looked up at call time,
# tensor_parallel/layers.py at core_v0.16.1: 948, 1239); our runtime replaces it process-wide.
MEGATRON_LINEAR = "megatron.core.tensor_parallel.layers.linear_with_grad_accumulation_and_async_allreduce"


def linear_in_use() -> str:
    """The qualified name of the function megatron-core's parallel linear layers call now."""
    from megatron.core.tensor_parallel import layers

    fn = layers.linear_with_grad_accumulation_and_async_allreduce
    return f"{fn.__module__}.{fn.__qualname__}"


@contextlib.contextmanager
def megatron_own_linear():
    """Run an oracle (the reference, megatron's own schedules) on megatron-core's own linear
    layers: a schedule of ours run earlier in this process left its hook installed
    (`get_forward_backward_func` installs it process-wide). Yields the list of what the layers
    call at entry and at exit (a test asserts both are MEGATRON_LINEAR); the hook comes back
    after if it was installed before."""
    from primus_megatron.runtime import linear_hooks

    hooked = linear_in_use() != MEGATRON_LINEAR
    linear_hooks.uninstall()
    seen = [linear_in_use()]
    try:
        yield seen
        seen.append(linear_in_use())
    finally:
        if hooked:
            linear_hooks.install()


def reference_losses_and_grads(full_model, microbatches):
    """Plain single-process run: per-microbatch losses and {global name: grad}.

    The objective is mean over microbatches of each microbatch's masked token
    mean, the same as megatron's schedules with either loss_func flavour.
    Callers run it inside `megatron_own_linear()`.
    """
    model = unwrap(full_model)
    model.zero_grad(set_to_none=True)
    n = len(microbatches)
    if getattr(model.config, "mtp_num_layers", None):
        from megatron.core.transformer.multi_token_prediction import MTPLossAutoScaler

        # what megatron's forward_step sets for the MTP losses' backward (schedules.py:296-305 at
        # core_v0.16.1): their share of the step, 1 / microbatches without a grad_scale_func
        MTPLossAutoScaler.set_loss_scale(torch.tensor(1.0 / n))
    losses = []
    for batch in microbatches:
        per_token = model(
            batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"]
        )
        mask = batch["loss_mask"].view(-1).float()
        loss = torch.sum(per_token.float().view(-1) * mask) / mask.sum()
        (loss / n).backward()
        losses.append(float(loss.detach()))
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return losses, grads


def mtp_losses_taken():
    """What megatron's MTP block tracked since the last call, emptied: per MTP layer, the sum over
    the training forwards of each microbatch's masked mean MTP loss (MTPLossLoggingHelper, what
    Megatron-LM logs as "mtp_<i> loss" after dividing by the microbatches); [] if none tracked."""
    from megatron.core.transformer.multi_token_prediction import MTPLossLoggingHelper

    tracker = MTPLossLoggingHelper.tracker
    # core_v0.16.1 tracks "values", core_v0.19.0 "loss_values" (and acceptance counts); each is sized at
    # its first use, and a next model may have another number of MTP layers
    found = [tracker.pop(key, None) for key in ("values", "loss_values", "correct_values", "total_values")]
    values = found[0] if found[0] is not None else found[1]
    return [] if values is None else values.tolist()


def chunk_grads(chunks):
    """{global name: grad} for this rank's chunks; duplicates (tied embedding) are summed."""
    grads = {}
    seen = set()  # a Parameter shared by two chunks (V placement, tied embedding) counts once
    for chunk in chunks:
        for name, param in named_global_parameters(chunk):
            if id(param) in seen:
                continue
            seen.add(id(param))
            grad = param.grad if param.grad is not None else getattr(param, "main_grad", None)
            if grad is None:
                continue
            grad = grad.detach().clone()
            grads[name] = grads[name] + grad if name in grads else grad
    return grads


def merge_grads(per_rank):
    """Merge {name: grad} dicts from all ranks, summing names held more than once."""
    merged = {}
    for grads in per_rank:
        for name, grad in grads.items():
            merged[name] = merged[name] + grad if name in merged else grad
    return merged


def compare(reference, actual):
    """(max abs diff, max relative diff, missing names, unexpected names) over grad dicts.

    Relative diff of a tensor is max|a - r| / max|r|.
    """
    missing = sorted(set(reference) - set(actual))
    extra = sorted(set(actual) - set(reference))
    max_abs, max_rel = 0.0, 0.0
    for name in set(reference) & set(actual):
        ref, act = reference[name].float(), actual[name].float()
        diff = (act - ref).abs().max().item()
        scale = ref.abs().max().item()
        max_abs = max(max_abs, diff)
        max_rel = max(max_rel, diff / scale if scale > 0 else diff)
    return max_abs, max_rel, missing, extra


def environment_ok():
    """Whether this interpreter can import megatron-core (for skip markers)."""
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        return False
    return True

