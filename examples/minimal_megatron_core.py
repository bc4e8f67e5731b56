"""The smallest complete use of primus_megatron on megatron-core (CPU, 2 ranks):

    torchrun --standalone --nproc-per-node 2 examples/minimal_megatron_core.py [SCHEDULE]

A 4-layer GPT split over 2 pipeline ranks runs the zbv schedule (default) and
learns to continue a counting sequence; the loss is printed on the rank that
holds the last stage (rank 0 under the V placement).
"""
import sys
from functools import partial

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.transformer_config import TransformerConfig

import primus_megatron as pm
from primus_megatron.compat import cpu

SCHEDULE = sys.argv[1] if len(sys.argv) > 1 else "zbv"
VOCAB, SEQ, MICRO_BATCH, MICROBATCHES = 64, 16, 4, 8

cpu.enable()  # megatron-core on CPU with gloo
dist.init_process_group("gloo")
parallel_state.initialize_model_parallel(pipeline_model_parallel_size=2)
chunks = pm.schedules.info(SCHEDULE).chunks
config = TransformerConfig(
    num_layers=4, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
    pipeline_dtype=torch.float32, pipeline_model_parallel_size=2,
    virtual_pipeline_model_parallel_size=chunks if chunks > 1 else None,
    hidden_dropout=0.0, attention_dropout=0.0)


def provider(pre_process, post_process, vp_stage=None):  # Megatron-LM's model-provider contract
    return GPTModel(config, get_gpt_layer_local_spec(), vocab_size=VOCAB, max_sequence_length=SEQ,
                    pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)


model = pm.build_model(provider, schedule=SCHEDULE)  # this rank's chunks, placed for the schedule


def batches():  # counting sequences: the next token is always +1
    g = torch.Generator().manual_seed(0)
    while True:
        start = torch.randint(0, VOCAB, (MICRO_BATCH, 1), generator=g)
        tokens = (start + torch.arange(SEQ + 1)) % VOCAB
        yield {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "positions": torch.arange(SEQ).repeat(MICRO_BATCH, 1)}


def forward_step(data_iterator, chunk):  # megatron's forward_step_func contract
    batch = next(data_iterator)
    output = chunk(batch["tokens"], batch["positions"], None, labels=batch["labels"])

    def loss_func(per_token_loss):
        loss = per_token_loss.float().mean()
        return loss, {"lm loss": loss.detach().clone()}

    return output, loss_func


forward_backward = pm.get_forward_backward_func(SCHEDULE)
optimizer = torch.optim.AdamW([p for chunk in model for p in chunk.parameters()], lr=3e-3)
data = batches()
for step in range(30):
    optimizer.zero_grad(set_to_none=True)
    losses = forward_backward(forward_step_func=forward_step, data_iterator=data, model=model,
                              num_microbatches=MICROBATCHES, seq_length=SEQ, micro_batch_size=MICRO_BATCH)
    optimizer.step()
    if losses:  # only the rank holding the last stage gets the loss dicts
        print(f"{SCHEDULE} step {step:2d}  loss {sum(float(x['lm loss']) for x in losses) / len(losses):.4f}",
              flush=True)
dist.destroy_process_group()
