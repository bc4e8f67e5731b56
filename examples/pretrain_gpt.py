#!/usr/bin/env python
"""Pretrain a GPT on megatron-core with a zero-bubble pipeline schedule.

Megatron-LM's argument names, plus --pipeline-schedule NAME (any registered
schedule: `primus-pipeline list`), --pipeline-memory-limit, --timeline FILE and
--cpu. Launch with torchrun, e.g. on CPU:

    torchrun --nproc-per-node 4 examples/pretrain_gpt.py --cpu --pipeline-model-parallel-size 4 \\
        --pipeline-schedule zbv --data-path out/data/corpus_text_document --train-iters 40
"""
import sys

from primus_megatron.train.launch import main

if __name__ == "__main__":
    sys.exit(main())
