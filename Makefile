# One virtualenv (.venv) with pinned torch (CPU wheel) and megatron-core.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo plan test bench clean

# Megatron-LM builds its dataset helpers with `python3-config` from PATH: give the venv the
# interpreter's own (a pyenv shim would answer for the Python of the checkout's .python-version).
define LINK_PYTHON_CONFIG
import os, sys, sysconfig
src = os.path.join(sysconfig.get_config_var("BINDIR"), "python3-config")
dst = os.path.join(os.path.dirname(sys.executable), "python3-config")
if os.path.exists(src) and not os.path.lexists(dst):
    os.symlink(src, dst)
endef
export LINK_PYTHON_CONFIG

$(STAMP): requirements.txt requirements-megatron-lm.txt setup.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "installing pinned requirements into $(VENV) (log: $(VENV)/install.log)"
	@( $(BIN)/python -m pip install --upgrade pip && \
	   $(BIN)/python -m pip install -r requirements.txt -r requirements-megatron-lm.txt && \
	   $(BIN)/python -m pip install --no-deps --no-build-isolation -e . && \
	   $(BIN)/python -c "$$LINK_PYTHON_CONFIG" ) > $(VENV)/install.log 2>&1 \
	   || (tail -40 $(VENV)/install.log; exit 1)
	touch $@

setup: $(STAMP)

# The main job: a real pipelined training run of a small GPT on 4 CPU ranks with a
# zero-bubble schedule, on the bundled text corpus; draws the executed schedule.
SCHEDULE ?= zbv
DEMO_ARGS = --cpu --pipeline-model-parallel-size 4 --pipeline-schedule $(SCHEDULE) \
	--data-path out/data/corpus_text_document --num-layers 8 --hidden-size 128 --num-attention-heads 4 \
	--seq-length 128 --micro-batch-size 4 --global-batch-size 32 --train-iters 40 --lr 1e-3 \
	--lr-warmup-iters 4 --min-lr 1e-4 --eval-interval 20 --eval-iters 2 --timeline out/demo_timeline.png

# With at least 4 cores each rank gets its own (pinned); with fewer they time-share, and the
# picture and the log say so.
demo: $(STAMP)
	$(BIN)/python -m primus_megatron.train.data --build-corpus-dataset out/data/corpus_text_document
	OMP_NUM_THREADS=1 PRIMUS_PIN_RANKS=$$( [ $$(nproc) -ge 4 ] && echo 1 || echo 0 ) \
	$(BIN)/torchrun --standalone --nproc-per-node 4 examples/pretrain_gpt.py $(DEMO_ARGS)

# The planner alone: every schedule compared at pp=8, 24 microbatches (table + picture).
plan: $(STAMP)
	$(BIN)/python examples/compare_schedules.py

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

clean:
	rm -rf $(VENV) out *.egg-info
