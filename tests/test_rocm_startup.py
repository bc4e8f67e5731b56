"""What a first run on an AMD Instinct node would hit before step 1 (issue 45), shown on CPU.

Item 1: AMD's Primus images export NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1, and megatron-core 0.16.1 asserts at
model build that each set variable equals what `attention_backend` implies (language_module.py:92-126), so
the default `auto` stopped our training script, Megatron-LM and the GPU check. Item 3: the default GPU run
asked for megatron's fused softmax, whose apex kernel such images lack."""
from __future__ import annotations

import pytest

import megatron_reference as ref
from primus_megatron.compat.attention_env import AttentionEnvError, backend_for

pytestmark = pytest.mark.skipif(not ref.environment_ok(), reason="megatron-core is not installed")


@pytest.mark.parametrize("env, backend", [
    ({}, None),
    ({"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1"}, "fused"),  # AMD's Primus images
    ({"NVTE_FLASH_ATTN": "1"}, "auto"),
    ({"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0"}, "flash"),
    ({"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "0"}, "unfused"),
    ({"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}, "local"),
])
def test_the_backend_every_set_variable_agrees_with(env, backend):
    assert backend_for(env) == backend


def test_variables_no_backend_agrees_with_are_one_sentence():
    with pytest.raises(AttentionEnvError, match="NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=1, NVTE_UNFUSED_ATTN=0 match no "
                                                "attention backend"):
        backend_for({"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"})


def test_our_model_builds_under_amds_attention_variables(monkeypatch):
    """The training script's model under NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1: megatron's assertion passes
    (it failed with auto: "NVTE_FLASH_ATTN set to 0, but expected 1")."""
    from primus_megatron.train import model as M
    from primus_megatron.train.arguments import parse_run

    monkeypatch.setenv("NVTE_FLASH_ATTN", "0")
    monkeypatch.setenv("NVTE_FUSED_ATTN", "1")
    monkeypatch.delenv("NVTE_UNFUSED_ATTN", raising=False)
    args, spec = parse_run(["--cpu", "--mock-data", "--num-layers", "2", "--hidden-size", "32",
                            "--num-attention-heads", "4"], 1)
    assert M.transformer_config(args, spec).attention_backend.name == "fused"
    from types import SimpleNamespace

    from megatron.core.models.common.language_module.language_module import LanguageModule

    def build_check(config) -> None:  # the assertion megatron runs as a language model is built
        LanguageModule._set_attention_backend(SimpleNamespace(config=config))

    build_check(M.transformer_config(args, spec))
    monkeypatch.setattr(M, "_attention_backend", lambda: {})  # what the script did before: megatron's auto
    monkeypatch.setenv("NVTE_FLASH_ATTN", "0")  # (the check above set the other two as fused wants them)
    monkeypatch.setenv("NVTE_FUSED_ATTN", "1")
    monkeypatch.delenv("NVTE_UNFUSED_ATTN", raising=False)
    with pytest.raises(AssertionError, match="NVTE_FLASH_ATTN set to 0, but expected 1"):
        build_check(M.transformer_config(args, spec))


def test_the_gpu_kits_models_build_under_amds_attention_variables(monkeypatch):
    """make gpu-bench's blocks (benchmarks/gpu_blocks.py) and the throughput benchmark / GPU check's model
    (benchmarks/runtime_throughput.py) take the backend NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1 ask for:
    megatron's check passes where its default auto asserted."""
    import os
    import sys
    from types import SimpleNamespace

    from megatron.core.models.common.language_module.language_module import LanguageModule

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    try:
        import gpu_blocks
        import runtime_throughput as RT
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("NVTE_FLASH_ATTN", "0")
    monkeypatch.setenv("NVTE_FUSED_ATTN", "1")
    monkeypatch.delenv("NVTE_UNFUSED_ATTN", raising=False)
    block = gpu_blocks.blocks(dry_run=True)["dense"]
    configs = {"gpu_blocks": gpu_blocks.transformer_config(block, num_layers=2, gpu=False),
               "runtime_throughput": RT.gpt_config(RT.MODEL, pp=2, chunks=1)}
    for name, config in configs.items():
        assert config.attention_backend.name == "fused", name
        LanguageModule._set_attention_backend(SimpleNamespace(config=config))  # megatron's assertion


def test_megatron_lm_takes_the_backend_the_variables_ask_for(monkeypatch):
    """The plugin's validate_args: --attention-backend left at auto takes the one NVTE_*_ATTN agree with;
    a backend the user named is left to megatron's own check."""
    from types import SimpleNamespace

    from megatron.core.transformer.enums import AttnBackend

    from primus_megatron.megatron_lm.plugin import _attention_backend_from_env

    monkeypatch.setenv("NVTE_FLASH_ATTN", "0")
    monkeypatch.setenv("NVTE_FUSED_ATTN", "1")
    monkeypatch.delenv("NVTE_UNFUSED_ATTN", raising=False)  # megatron's own builds set it in this process
    args = SimpleNamespace(attention_backend=AttnBackend.auto)
    _attention_backend_from_env(args)
    assert args.attention_backend == AttnBackend.fused
    named = SimpleNamespace(attention_backend=AttnBackend.flash)
    _attention_backend_from_env(named)
    assert named.attention_backend == AttnBackend.flash


def test_the_fused_softmax_is_asked_for_only_where_its_kernel_is_installed(monkeypatch):
    """Issue 45 item 3: on a GPU without apex's scaled_masked_softmax_cuda (ROCm images without apex, the
    H200 image) megatron's FusedScaleMaskSoftmax imports it at the first forward and fails; the training
    script asks for the fusion only where the kernel imports."""
    from primus_megatron.train import model as M
    from primus_megatron.train.arguments import parse_run

    for name in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"):
        monkeypatch.delenv(name, raising=False)
    args, spec = parse_run(["--mock-data", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4"],
                           1)
    assert args.cpu is False
    monkeypatch.setattr(M, "_has_module", lambda name: False)
    assert M.transformer_config(args, spec).masked_softmax_fusion is False
    monkeypatch.setattr(M, "_has_module", lambda name: name == "scaled_masked_softmax_cuda")
    assert M.transformer_config(args, spec).masked_softmax_fusion is True


def _primus_patch(monkeypatch, *, schedules: bool, store: bool) -> None:
    """What Primus does (AMD-AGI/Primus: its zero-bubble patch assigns Megatron-LM's
    get_forward_backward_func; te_wgrad_store.py's patch_weight_grad_store assigns __init__, put and pop
    on TE's own WeightGradStore class, which keeps TE's module name)."""
    import sys
    import types

    training = types.ModuleType("megatron.training.training")

    def primus_fbf():
        return None

    primus_fbf.__module__ = "primus.backends.megatron.patches.zero_bubble" if schedules else "megatron.training"
    training.get_forward_backward_func = primus_fbf
    monkeypatch.setitem(sys.modules, "megatron.training.training", training)
    common = types.ModuleType("transformer_engine.pytorch.module._common")

    class WeightGradStore:  # TE's class, its module TE's
        def put(self, tensor_list, func):
            return None

    WeightGradStore.__module__ = "transformer_engine.pytorch.module._common"
    if store:
        def _primus_put(self, tensor_list, func):
            return None

        _primus_put.__module__ = "primus.backends.megatron.core.extensions.te_wgrad_store"
        WeightGradStore.put = _primus_put
    common.WeightGradStore = WeightGradStore
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch.module._common", common)


def test_amd_primus_engines_are_named_when_active(monkeypatch):
    """Issue 45 item 14: AMD Primus's zero-bubble / pipeline patches replace the get_forward_backward_func
    our plugin replaces, and its TE patch replaces WeightGradStore's methods in place; active in the
    process, they are named."""
    from primus_megatron.compat.primus_engines import conflict

    assert conflict() is None
    _primus_patch(monkeypatch, schedules=False, store=False)
    assert conflict() is None  # TE's own class, megatron's own function: nothing of Primus's
    _primus_patch(monkeypatch, schedules=False, store=True)
    sentence = conflict()
    assert "WeightGradStore" in sentence and "patch_zero_bubble" not in sentence and "--pipeline-schedule" in sentence
    _primus_patch(monkeypatch, schedules=True, store=True)
    sentence = conflict()
    assert "patch_zero_bubble" in sentence and "WeightGradStore" in sentence


def test_amd_primus_patches_applied_after_validate_args_stop_the_first_step(monkeypatch):
    """Primus applies its pipeline patches in its before_train phase, after Megatron-LM's validate_args
    (where the plugin checks first): a schedule's first step checks again, before it runs anything."""
    from primus_megatron.runtime import forward_backward as fb

    _primus_patch(monkeypatch, schedules=False, store=True)
    with pytest.raises(fb.UnsupportedSetting, match="AMD Primus's pipeline patches are active in this process \\(its TransformerEngine WeightGradStore"):
        fb._refuse_unsupported(None, [], None)  # what a plan's first use calls first (_first_use)
