# One virtualenv (.venv) with pinned torch (CPU wheel; a ROCm one with TORCH=..., docs/amd.md) and megatron-core.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# The second test leg: Python 3.12 + the newest megatron-core (requirements-py312.txt), in a
# virtualenv outside the clone keyed by that file's hash, so a repeat run (or another clone)
# installs nothing; `make clean` leaves it (`make clean-py312` removes it).
REQ312 := requirements-py312.txt
REQ312_HASH := $(shell sha256sum $(REQ312) | cut -c1-12)
CACHE312 ?= $(HOME)/.cache/primus_megatron
VENV312 ?= $(CACHE312)/venv-py312-$(REQ312_HASH)
STAMP312 := $(VENV312)/.installed-stamp
# What the second leg runs: every megatron-core difference (test_megatron_core_compat.py), the
# deferred-W units, parity with megatron's own schedules, the production configurations, training and
# checkpoints, megatron's optimizers' checkpoints on CPU, post-validation, and Megatron-LM
# core_v0.19.0's own loop (with local and with TransformerEngine layers, the latter also in FP8, and with context parallelism:
# its model builder and DDP wrapping differ from core_v0.16.1's); with our schedules limited to one of each kind (1f1b, zb-h1, zbv:
# tests/schedule_subset.py), since the schedules themselves do not depend on megatron-core.
PY312_SCHEDULES ?= 1f1b,zb-h1,zbv
# ... less what reads no megatron-core: our training CLI's argument refusals and its demo picture; and
# Megatron-LM's router options under zb-h1 (expert bias with capacity, one launch: megatron-core's router, which our
# runtime does not touch; the MoE model itself, grouped and sequential experts, stays); and our FP8 B/W split
# broken on purpose (tests/fp8_breakages.py: our runtime and the TE stand-in, no megatron-core; the FP8
# comparison that catches it runs on both legs); and two refusals our plugin makes in Megatron-LM's argument
# checks before megatron-core builds anything (a misspelt --pipeline-schedule, MLA on local layers). Megatron-LM's
# runs that ask for torchrun fork their ranks there (PRIMUS_TEST_TORCHRUN=0: torchrun is torch's, not
# megatron-core's; tests/megatron_lm_harness.py).
# Also left to the first leg (2026-11-29, suite time): runs whose megatron-core contact another test of this
# leg makes too: our training loop's Llama block, balanced data and per-token loss (the matrix's
# m-mtp-moe-ep2-llama and l-balance-lb-mini-te rows here), Megatron-LM's MoE on local layers under zb-h1 and
# zbv (its TE layers, and local layers under dualpipev with offload, stay), grouped experts under zb-h1 (zbv
# stays), and `auto` at pp 2 (the schedule it picks is pure Python; zb-h1 and zbv stay).
PY312_DESELECT ?= test_bad_arguments_exit_2_with_one_sentence or test_demo_picture_shows_plan_over_measurement \
	or test_moe_variants_train_exactly_as_megatron[router] \
	or test_a_broken_fp8_split_is_caught or test_a_bad_schedule_option_gets_one_sentence \
	or test_multi_latent_attention_on_local_layers_is_refused_in_one_sentence \
	or test_llama_style_model_trains_identically_under_every_schedule or test_balanced_data_trains_as_megatrons_own_schedule \
	or test_per_token_loss_normalises_as_megatrons_own_schedule \
	or test_moe_variants_train_exactly_as_megatron[local-sequential] or test_a2a_overlap_trains_exactly_as_megatron[zbv-local] \
	or test_grouped_experts_train_exactly_as_megatron[zb-h1] or test_pp2_schedule_trains_exactly_as_megatron[auto]
# The production matrix's rows on that leg: one per megatron-core feature the runtime touches (overlapped
# DDP reduce; the distributed optimizer with overlapped gathers, with post-validation; fused accumulation with tied
# embeddings; TP + SP; MoE's combined F&B step; TE grouped experts; the DeepSeek block (MLA, MoE); local experts in
# the Llama block with multi-token prediction, whose placement core_v0.19.0's GPTModel asks anew; selective
# recompute; context parallelism; packed thd batches with LB-Mini); the first leg runs every row. Left to the
# first leg (2026-11-29): the rows whose feature another row here runs too (distributed optimizer with
# overlapped gathers, without post-validation; local MoE experts without MTP; the Llama block without MTP; the
# plain split's thd twin of LB-Mini, whose comparison with LB-Mini is our balancing, not megatron-core).
PY312_MATRIX_ROWS ?= a-overlap-grad-sync b-distopt-overlap-post-validation \
	d-tied-fusion-overlap e-tp2-sp f-moe-ep2-bf16-a2a-overlap g-bf16-selective-recompute h-moe-grouped-te \
	j-deepseek-mla-moe-te k-cp2-te l-balance-lb-mini-te m-mtp-moe-ep2-llama
EMPTY :=
COMMA := ,
SPACE := $(EMPTY) $(EMPTY)
PY312_TESTS ?= tests/test_megatron_core_compat.py tests/test_runtime_units.py tests/test_runtime_parity.py \
	tests/test_production_matrix.py tests/test_training.py tests/test_cpu_optimizer_checkpoints.py \
	tests/test_post_validation.py tests/test_megatron_lm_e2e.py tests/test_megatron_lm_te.py tests/test_megatron_lm_fp8.py \
	tests/test_megatron_lm_moe.py tests/test_megatron_lm_mtp.py tests/test_megatron_lm_dsv3.py \
	tests/test_megatron_lm_architectures.py tests/test_megatron_lm_context_parallel.py tests/test_megatron_lm_sft.py \
	tests/test_te_wgrad.py

.PHONY: setup setup-py312 demo plan test test-under-load test-py311 test-py311-rest test-py311-launches test-py311-megatron-lm test-py312 bench gpu-check gpu-check-dry-run gpu-bench gpu-bench-dry-run \
	gpu-projection gpu-te-bundle gpu-te gpu-te-dry-run clean clean-py312 clean-gpu-te-bundle

# Where .venv's torch comes from (scripts/setup_venv.sh, docs/amd.md): auto (PyPI's pinned wheel; refused on
# a ROCm node, where it sees no GPU), pypi, system (the torch of PY, e.g. a ROCm image's python3, through
# --system-site-packages) or a package index URL (PyTorch's ROCm wheels). `make clean` first to change it.
TORCH ?= auto

$(STAMP): requirements.txt requirements-megatron-lm.txt setup.py scripts/setup_venv.sh
	@mkdir -p $(VENV) && echo "installing pinned requirements into $(VENV) (log: $(VENV)/install.log)"
	@TORCH='$(TORCH)' scripts/setup_venv.sh $(PY) $(VENV) > $(VENV)/install.log 2>&1 \
	   || { tail -40 $(VENV)/install.log; exit 1; }
	touch $@

setup: $(STAMP)

# Built in place (a virtualenv cannot move); the stamp is written last, so a half-built one is
# removed and built again. The requirements file is an order-only prerequisite: its content is in
# the path already, and a fresh clone's newer file time must not rebuild the cached virtualenv.
$(STAMP312): | $(REQ312)
	@PY312=$$(scripts/find_python312.sh) || exit 1; \
	rm -rf $(VENV312) && mkdir -p $(CACHE312) && $$PY312 -m venv $(VENV312) && \
	echo "installing $(REQ312) with $$PY312 into $(VENV312) (log: $(VENV312)/install.log)" && \
	( $(VENV312)/bin/python -m pip install -r $(REQ312) ) > $(VENV312).install.log 2>&1 \
	   || { tail -40 $(VENV312).install.log; exit 1; }; \
	mv $(VENV312).install.log $(VENV312)/install.log
	touch $@

setup-py312: $(STAMP312)

# The main job: a real pipelined training run of a small GPT on 4 CPU ranks with a
# zero-bubble schedule, on the bundled text corpus; draws the executed schedule.
SCHEDULE ?= zbv
DEMO_ARGS = --cpu --pipeline-model-parallel-size 4 --pipeline-schedule $(SCHEDULE) \
	--data-path out/data/corpus_text_document --num-layers 8 --hidden-size 128 --num-attention-heads 4 \
	--seq-length 128 --micro-batch-size 4 --global-batch-size 32 --train-iters 40 --lr 1e-3 \
	--lr-warmup-iters 4 --min-lr 1e-4 --eval-interval 20 --eval-iters 2 --timeline out/demo_timeline.png \
	--position-embedding-type rope --swiglu --normalization RMSNorm --group-query-attention --num-query-groups 2 \
	--disable-bias-linear

# With at least 4 cores each rank gets its own (pinned); with fewer they time-share, and the
# picture and the log say so and show the executed order replayed from each op's CPU time.
DEMO_CMD = OMP_NUM_THREADS=1 PRIMUS_PIN_RANKS=$(shell [ $$(nproc) -ge 4 ] && echo 1 || echo 0) \
	$(BIN)/torchrun --standalone --nproc-per-node 4 examples/pretrain_gpt.py $(DEMO_ARGS)

# the command is shown in lines a terminal shows whole (and a shell takes as they are)
demo: $(STAMP)
	$(BIN)/python -m primus_megatron.train.data --build-corpus-dataset out/data/corpus_text_document
	@echo '$(DEMO_CMD)' | fold -s -w 98 | sed -e 's/ *$$//' -e '$$!s/$$/ \\/'
	@$(DEMO_CMD)

# The planner alone: every schedule compared at pp=8, 24 microbatches (table + picture).
plan: $(STAMP)
	$(BIN)/python examples/compare_schedules.py

# Both CI legs: Python 3.11 + megatron-core 0.16.1 (the whole suite) and Python 3.12 + the newest
# megatron-core (PY312_TESTS; the project from this checkout via PYTHONPATH), in four streams side by
# side, so that no one stream holds the end alone. The suite is bound by CPU: scripts/cpu_time.py
# (which counts orphaned ranks too) measured 77.4 CPU-minutes in 43.9 minutes for a clean clone of
# b8aecf6 (2026-11-29), 88% of 2 cores, and after the "Halved" passes (docs/testing.md) 58.7 CPU-minutes in
# 31.6 minutes (the streams ending at 29.4-29.6; 67.3 in 36.9 on a second clone; 64.5 in 34.4 after the
# evening's changes, docs/testing.md "Frozen, warmed, trimmed"); on the night's AMX machine 27.1 CPU-minutes in 15.0
# minutes from empty caches (docs/testing.md "Another machine"); more streams only even out when each part ends.
# Leg 1 is cut in three: its Megatron-LM files (PY311_MEGATRON_LM), its longest launches and the GPU
# kit's dry runs (PY311_LAUNCHES) and the rest; leg 2 is the fourth. Each background stream's output goes to
# out/<stream>.log, printed when it ends; the target fails if any part fails.
# `make test-py311` / `make test-py312` run one whole leg.
PY311_MEGATRON_LM := $(sort $(wildcard tests/test_megatron_lm_*.py)) tests/test_slurm.py
PY311_LAUNCHES := tests/test_production_matrix.py tests/test_reliability_faults.py tests/test_gpu_bench.py \
	tests/test_postmortem.py tests/test_post_validation.py tests/test_gpu_check.py
TEST_STREAMS := test-py312 test-py311-megatron-lm test-py311-launches
test: $(STAMP) $(STAMP312)
	@mkdir -p out
	@echo "test: streams $(TEST_STREAMS) run beside this one (leg 1's other files); output: out/<stream>.log"
	@pids=""; for s in $(TEST_STREAMS); do \
	  setsid $(MAKE) --no-print-directory $$s > out/$$s.log 2>&1 & pids="$$pids $$!"; done; \
	trap 'for p in $$pids; do kill -- -$$p 2>/dev/null; done; exit 130' INT TERM; \
	$(MAKE) --no-print-directory test-py311-rest; rc=$$?; summary="test-py311-rest exit $$rc"; \
	set -- $$pids; for s in $(TEST_STREAMS); do wait $$1; r=$$?; shift; \
	  echo "== stream $$s (out/$$s.log) =="; cat out/$$s.log; \
	  summary="$$summary, $$s exit $$r"; [ $$r -eq 0 ] || rc=1; done; \
	echo "test: $$summary"; [ $$rc -eq 0 ]

# The suite with one busy process per core beside it (RUNS=3 for three whole runs): tests that depend on
# which rank or thread runs first fail here. Not in CI; once per change to launching or timeouts.
test-under-load: $(STAMP) $(STAMP312)
	RUNS=$${RUNS:-1} scripts/test_under_load.sh

# Each leg also writes every test's duration to out/ (JUnit XML), for finding what makes the suite slow.
# One OpenMP thread per process: the suite runs many processes on 2 cores, and torch's default (one thread
# per core, spinning between parallel regions) spends a third more CPU on the same work (the GPU kit's dry
# run: 81 s of CPU alone, 55 s with one thread); multi-rank launches set it already.
test test-py311 test-py311-rest test-py311-launches test-py311-megatron-lm test-py312: export OMP_NUM_THREADS = 1
test-py311: $(STAMP)
	$(BIN)/python -m pytest -q --durations=20 --junitxml=out/test-py311.xml tests

test-py311-rest: $(STAMP)
	$(BIN)/python -m pytest -q --durations=20 --junitxml=out/test-py311.xml \
	  $(addprefix --ignore=,$(PY311_MEGATRON_LM) $(PY311_LAUNCHES)) tests

test-py311-launches: $(STAMP)
	$(BIN)/python -m pytest -q --durations=10 --junitxml=out/test-py311-launches.xml $(PY311_LAUNCHES)

test-py311-megatron-lm: $(STAMP)
	$(BIN)/python -m pytest -q --durations=10 --junitxml=out/test-py311-megatron-lm.xml $(PY311_MEGATRON_LM)

test-py312: $(STAMP312)
	PYTHONPATH=$(CURDIR) PRIMUS_TEST_SCHEDULES=$(PY312_SCHEDULES) PRIMUS_TEST_TORCHRUN=0 PRIMUS_TEST_MATRIX_ROWS=$(subst $(SPACE),$(COMMA),$(strip $(PY312_MATRIX_ROWS))) \
	  $(VENV312)/bin/python -m pytest -q --durations=10 -p no:cacheprovider --junitxml=out/test-py312.xml \
	  -k "not ($(PY312_DESELECT))" $(PY312_TESTS)

# On a machine with GPUs: every schedule x pp 2..#GPUs x eager/lazy NCCL init x the stream knobs,
# Megatron-LM's pretrain_gpt.py with TransformerEngine (bf16, FP8 where the GPU has it), parity and
# speed against megatron's own 1F1B; report in out/gpu_check/report.{md,json}.
# (GPU_CHECK_ARGS: e.g. --schedules zbv,zb-h1 --max-pp 4.)
# GPU_PYTHON: run the GPU targets with that interpreter instead of make setup's .venv, whose torch is
# PyPI's (CUDA's): on an AMD node the ROCm image's python (ROCm torch, megatron-core), e.g.
# `make gpu-check GPU_PYTHON=python3` (this checkout on its PYTHONPATH; no .venv built).
GPU_PYTHON ?=
GPU_DEPS = $(if $(GPU_PYTHON),,$(STAMP))
GPU_RUN = $(if $(GPU_PYTHON),PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON),$(BIN)/python)
gpu-check: $(GPU_DEPS)
	$(GPU_RUN) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

# The same on CPU (gloo, 2 ranks, 1f1b and zbv), as the test suite runs it (tests/test_gpu_check.py).
gpu-check-dry-run: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --cpu-dry-run --megatron-lm $(GPU_CHECK_ARGS)

# On one GPU: what the weight-gradient split costs at real layer sizes (a Llama-3-8B-like dense and a
# Qwen3-30B-A3B-like MoE block), our executor's host gap against megatron's 1F1B at pp=2, activation
# offload's GPU path, Megatron-LM's pretrain_gpt.py and CUDA_DEVICE_MAX_CONNECTIONS unset; about
# 8 minutes (--deadline-min); report and profiles in out/gpu_bench/. (GPU_BENCH_ARGS: e.g. --parts split.)
gpu-bench: $(GPU_DEPS)
	$(GPU_RUN) benchmarks/gpu_bench.py $(GPU_BENCH_ARGS)

# The same on CPU (gloo, toy shapes, forked ranks); tests/test_gpu_bench.py runs it with the gap part through
# the GPU launch path and the check part's matrix for zbv alone.
gpu-bench-dry-run: $(STAMP)
	$(BIN)/python benchmarks/gpu_bench.py --cpu-dry-run $(GPU_BENCH_ARGS)

# TransformerEngine for one Hopper GPU machine without package access (docs/transformer-engine.md):
# `make gpu-te-bundle` (here, with PyPI) downloads TE 2.11.0 and what it needs (requirements-gpu-te.txt),
# cuts TE's core library to sm_90, compiles its torch binding against torch 2.11.0+cu130 and packs one
# file under 60 MiB into $(CACHE312)/te-bundle (resumable; `make clean-gpu-te-bundle` removes it, downloads
# too); `make gpu-te` (there) unpacks it and runs TE's checks and measurements, report in out/gpu_te/.
# It needs no virtualenv (the standard library and pip): no .venv is built for it.
gpu-te-bundle:
	$(PY) benchmarks/gpu_te_bundle.py --cache $(CACHE312)/te-bundle $(GPU_TE_BUNDLE_ARGS)

gpu-te: $(GPU_DEPS)
	$(GPU_RUN) benchmarks/gpu_te.py $(GPU_TE_ARGS)

# The same on CPU with TE's stand-in in place of the bundle (tests/test_gpu_te_dry_run.py).
gpu-te-dry-run: $(STAMP)
	$(BIN)/python benchmarks/gpu_te.py --cpu-dry-run $(GPU_TE_ARGS)

clean-gpu-te-bundle:
	rm -rf $(CACHE312)/te-bundle

# Projected step-time ratios at pp 8-32 from a GPU benchmark's report (CPU; REPORT=out/gpu_bench/report.json).
REPORT ?= out/gpu_bench/report.json
gpu-projection: $(STAMP)
	$(BIN)/python benchmarks/gpu_projection.py --report $(REPORT) $(GPU_PROJECTION_ARGS)

clean:
	rm -rf $(VENV) out *.egg-info

clean-py312:
	rm -rf $(CACHE312)/venv-py312-*
