"""Our megatron-core training stack behind examples/pretrain_gpt.py: Megatron-LM's
arguments, data, model/optimizer setup, the loop, checkpoints."""
