"""Run Megatron-LM's own pretrain_gpt.py (with our patch) on CPU ranks, for the tests.

The Megatron-LM tag is the one matching the installed megatron-core (`matching_tag`:
core_v0.16.1 for 0.16.1, core_v0.19.0 for 0.19.x). Its source is MEGATRON_LM_PATH (a
checkout at that tag) if set, else the unmodified snapshot in ../shared/megatron-lm/
beside the repository. It is
copied or unpacked once per test session into a temporary folder, patched with
that tag's patch from patches/ (by `patches/apply_patch.sh`, as a user does), and every run there shares it (its dataset
helpers compiled with Megatron-LM's own Makefile once per machine, kept under HELPERS_CACHE).

`run(...)` runs `pretrain_gpt.py --cpu` on CPU ranks and parses Megatron-LM's own log
lines: per-iteration lm loss, grad norm and skipped iterations, and the validation losses.
The ranks are forked from one process per tree that imported pretrain_gpt.py once
(megatron_lm_forks.py: torchrun's environment per rank, pretrain_gpt.py run as __main__,
torchrun's rule for a failing rank), since those imports cost about 9 s of CPU per rank;
`launcher="torchrun"` (or PRIMUS_TEST_TORCHRUN=1 for every run) starts
`torchrun --standalone` as a user does; test_megatron_lm_e2e's bf16 dry run does, and
test_slurm.py trains under srun + torchrun. PRIMUS_TEST_TORCHRUN=0 (the second CI leg) forks those ranks too: torchrun
is torch's, the same whatever megatron-core runs, and a torchrun launch imports everything in every
rank (about 25 s of CPU for 2 ranks).
"""
from __future__ import annotations

import atexit
import json
import os
import re
import runpy
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNAPSHOTS = os.path.join(os.path.dirname(ROOT), "shared", "megatron-lm")
PATCHES = os.path.join(ROOT, "patches")
APPLY_PATCH = os.path.join(PATCHES, "apply_patch.sh")  # picks the checkout's patch, applies it whole or not at all
TE_STANDIN = os.path.join(ROOT, "tests", "te_standin")  # the `transformer_engine` of run(te=True) only
SFT_STANDIN = os.path.join(ROOT, "tests", "sft_standin")  # `datasets` and `transformers` of run(sft=True) only
# the stand-in's switch to answer as an FP8 device (te_standin/.../pytorch/quantization.py), for run(fp8_device=...)
TE_STANDIN_FP8_ENV = "TE_STANDIN_EMULATE_FP8_DEVICE"


def matching_tag(version: str = None) -> str:
    """The Megatron-LM tag whose megatron-core matches the installed one (same major.minor; a
    user's tag): core_v0.16.1 for megatron-core 0.16.1, core_v0.19.0 for 0.19.x. MEGATRON_LM_TAG
    overrides it (with MEGATRON_LM_PATH, name the checkout's tag)."""
    if os.environ.get("MEGATRON_LM_TAG"):
        return os.environ["MEGATRON_LM_TAG"]
    if version is None:
        version = _installed_megatron_core()
    major_minor = tuple(version.split(".")[:2])
    tags = sorted(p for p in os.listdir(PATCHES) if p.startswith("megatron-lm-core_v") and p.endswith(".patch"))
    tags = [p[len("megatron-lm-"):].split("-")[0] for p in tags]  # core_vX.Y.Z
    for tag in reversed(tags):
        if tuple(tag[len("core_v"):].split(".")[:2]) == major_minor:
            return tag
    raise MegatronLMUnavailable(f"no patch in {PATCHES} matches megatron-core {version} (patches for: "
                                f"{', '.join(tags)}); install a supported megatron-core or set MEGATRON_LM_TAG")


def _installed_megatron_core() -> str:
    """The installed megatron-core's version, read from its package_info.py without importing
    megatron.core (whose import, torch's and its own, costs this test process about 5 s of CPU that
    nothing else in a Megatron-LM test file spends: its runs import it in their own processes)."""
    import importlib.util

    spec = importlib.util.find_spec("megatron")  # a namespace package: finding it imports nothing heavy
    for base in (spec.submodule_search_locations or []) if spec else []:
        info = os.path.join(base, "core", "package_info.py")
        if os.path.isfile(info):
            return runpy.run_path(info)["__version__"]
    from megatron.core.package_info import __version__  # not laid out as a package on disk: import it

    return __version__


# The comparisons' runs evaluate once, after training (Megatron-LM's validation and test evaluations,
# which it runs whatever --eval-interval says): an evaluation during training at the last iteration,
# what --eval-interval ITERS added, read the same weights on another batch (a third of a 3-iteration
# run's evaluating, about 7% of its CPU). Tests of evaluating during training (e2e) give their own.
EVAL_AFTER_TRAINING = ["--eval-interval", "1000"]
RUN_TIMEOUT_S = 300     # one torchrun (10-30 s here: start-up, 2-4 ranks on 2 cores)
P2P_TIMEOUT_S = 120     # a rank waiting on a peer fails with a diagnosis before the run's timeout

# a tiny GPT: 4 layers (2 stages of 2 per rank, or 4 V stages of 1), mock data, dropout 0
TINY = ["--transformer-impl", "local", "--no-persist-layer-norm", "--mock-data", "--tokenizer-type", "NullTokenizer",
        "--vocab-size", "128", "--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4",
        "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "2", "--lr", "1e-3",
        "--min-lr", "1e-4", "--lr-decay-style", "cosine", "--hidden-dropout", "0", "--attention-dropout", "0",
        "--log-interval", "1", "--eval-iters", "1", "--seed", "1234", "--clip-grad", "1.0",
        "--pipeline-p2p-timeout", str(P2P_TIMEOUT_S), "--distributed-timeout-minutes", "2",
        "--num-workers", "0"]
# --num-workers 0: Megatron-LM's default (2 persistent DataLoader workers per iterator, 6 per rank)
# forks workers from ranks that already run gloo threads, and shuts them down at interpreter exit;
# two CI runs failed there (a first-stage rank silent for 120 s before its first send; a rank
# aborting while exiting). CPU mode now sets it itself (megatron_lm/cpu_mode.py, said in its log line;
# run(megatron_defaults=True) leaves it to that); given here for the GPU check's runs too.

# searched, not matched: another rank's memory report may precede it on the same line
_ITER = re.compile(r"\[\d{4}-\d\d-\d\d [^\]]*\]\s*iteration\s+(\d+)/\s*(\d+) \|(.*)$")
_FIELD = re.compile(r"\s*([^:|]+):\s*([^|]+?)\s*\|")
_VALID = re.compile(r"validation loss at iteration\s+(\d+)( on validation set| on test set)? \| lm loss value: (\S+)")


class MegatronLMUnavailable(RuntimeError):
    """Neither MEGATRON_LM_PATH nor the shared snapshot is there."""


@dataclass
class Result:
    """What Megatron-LM logged: {iteration: value} per quantity, validation losses by
    (iteration, which), where which is '' (during training), 'validation set' or 'test set'."""
    losses: dict = field(default_factory=dict)
    grad_norms: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    aux_losses: dict = field(default_factory=dict)  # {iteration: {name: value}}: MoE's load-balancing losses etc.
    validation: dict = field(default_factory=dict)
    log: str = ""
    returncode: int = 0

    def numbers(self, iterations=None) -> dict:
        """Everything compared across schedules (as logged, so exact string equality)."""
        its = sorted(self.losses) if iterations is None else list(iterations)
        return {"lm loss": [self.losses.get(i) for i in its], "grad norm": [self.grad_norms.get(i) for i in its],
                "skipped": [self.skipped.get(i) for i in its],
                **({"aux losses": [self.aux_losses.get(i) for i in its]} if self.aux_losses else {}),
                "validation": {k: v for k, v in sorted(self.validation.items()) if iterations is None or k[0] in its}}


def parse(log: str) -> Result:
    result = Result(log=log)
    for line in log.splitlines():
        m = _ITER.search(line)
        if m:
            it = int(m.group(1))
            fields = dict((k.strip(), v.strip()) for k, v in _FIELD.findall(m.group(3) + "|"))
            result.losses[it] = fields.get("lm loss")
            result.grad_norms[it] = fields.get("grad norm")
            result.skipped[it] = fields.get("number of skipped iterations")
            aux = {k: v for k, v in fields.items() if k.endswith("loss") and k != "lm loss"}
            if aux:
                result.aux_losses[it] = aux
            continue
        m = _VALID.search(line)
        if m:
            which = (m.group(2) or "").replace(" on ", "").strip()
            result.validation[(int(m.group(1)), which)] = m.group(3)
    return result


def _python3_config(bindir: str) -> None:
    """Megatron-LM compiles its dataset helpers with `python3 -m pybind11 --includes` and
    `python3-config --extension-suffix` from PATH; its checkout pins another Python for
    pyenv (.python-version 3.12), so put this interpreter's answers first on PATH (and this
    interpreter's bin directory, for `python3`, right after: see run())."""
    os.makedirs(bindir, exist_ok=True)
    script = os.path.join(bindir, "python3-config")
    with open(script, "w") as f:
        f.write(f"#!{sys.executable}\n"
                "import sys, sysconfig\n"
                "out = []\n"
                "for a in sys.argv[1:]:\n"
                "    if a == '--extension-suffix': out.append(sysconfig.get_config_var('EXT_SUFFIX'))\n"
                "    elif a in ('--includes', '--cflags'):\n"
                "        out.append('-I' + sysconfig.get_path('include') + ' -I' + sysconfig.get_path('platinclude'))\n"
                "    else: sys.exit('python3-config stand-in: unsupported option ' + a)\n"
                "print(' '.join(out))\n")
    os.chmod(script, 0o755)


def _stack_dump_on_sigterm(sitedir: str) -> None:
    """A sitecustomize that prints every thread's stack when the process gets SIGTERM. When one
    rank fails, torchrun terminates the others with SIGTERM: the log then shows where each
    survivor was (in a hang, what it waited on), not only the rank that gave up first."""
    os.makedirs(sitedir, exist_ok=True)
    with open(os.path.join(sitedir, "sitecustomize.py"), "w") as f:
        f.write("import faulthandler, signal, sys\n"
                "faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)\n")


def prepare(workdir: str, tag: str = None) -> str:
    """A patched Megatron-LM tree under `workdir` (made once; returns its path), at `tag`
    (default: the one matching the installed megatron-core), patched with its own patch."""
    tag = tag or matching_tag()
    snapshot = os.path.join(SNAPSHOTS, f"Megatron-LM-{tag}.tar.gz")
    patch = os.path.join(PATCHES, f"megatron-lm-{tag}-pretrain_gpt.patch")
    if not os.path.isfile(patch):
        raise MegatronLMUnavailable(f"no patch for Megatron-LM {tag} in {PATCHES}")
    tree = os.path.join(workdir, f"Megatron-LM-{tag}")
    if os.path.isfile(os.path.join(tree, ".primus-patched")):
        return tree
    source = os.environ.get("MEGATRON_LM_PATH")
    if source:
        if not os.path.isfile(os.path.join(source, "pretrain_gpt.py")):
            raise MegatronLMUnavailable(f"MEGATRON_LM_PATH={source} has no pretrain_gpt.py")
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
    else:
        if not os.path.isfile(snapshot):
            raise MegatronLMUnavailable(
                f"the Megatron-LM snapshot {snapshot} is missing: these tests need Megatron-LM at tag {tag}; "
                f"set MEGATRON_LM_PATH to a checkout of it")
        with tarfile.open(snapshot) as tar:
            tar.extractall(workdir, filter="data")
        if not os.path.isdir(tree):
            raise MegatronLMUnavailable(f"{snapshot} did not unpack to {tree}")
    # as a user does: the checkout's own patch (by its tag or version), all hunks or none
    done = subprocess.run(["bash", APPLY_PATCH, tree], capture_output=True, text=True, timeout=60)
    if done.returncode != 0 or os.path.basename(patch) not in done.stdout:
        raise RuntimeError(f"{APPLY_PATCH} {tree} did not apply {patch}: {done.stdout}{done.stderr}")
    _python3_config(os.path.join(workdir, "bin"))
    _stack_dump_on_sigterm(os.path.join(workdir, "site"))
    _dataset_helpers(tree, os.path.join(workdir, "bin"))
    open(os.path.join(tree, ".primus-patched"), "w").close()
    return tree


HELPERS_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "primus_megatron",
                             "megatron-lm-helpers")


def _dataset_helpers(tree: str, bindir: str) -> None:
    """Megatron-LM's compiled dataset helpers in `tree`, from a cache outside the session when it has them.
    Megatron-LM compiles megatron/core/datasets/helpers.cpp with its own Makefile on a run's first start (about
    18 s of CPU, once per session and tree: each test file measured alone paid it again). Built here the same
    way (its Makefile, this interpreter's pybind11 and python3-config), kept under HELPERS_CACHE keyed by what
    the build reads, and copied in after: the library is newer than its source, so Megatron-LM's own `make`
    finds nothing to do. Without a writable cache it is built as before, by the first run."""
    import hashlib
    import importlib.metadata
    import sysconfig

    datasets = os.path.join(tree, "megatron", "core", "datasets")
    name = "helpers_cpp" + sysconfig.get_config_var("EXT_SUFFIX")
    try:
        pybind11 = importlib.metadata.version("pybind11")
        with open(os.path.join(datasets, "helpers.cpp"), "rb") as f, open(os.path.join(datasets, "Makefile"), "rb") as g:
            key = hashlib.sha256(f.read() + g.read() + f"{sys.version}|{pybind11}|{name}".encode()).hexdigest()[:16]
    except (OSError, importlib.metadata.PackageNotFoundError):
        return  # a tree laid out otherwise, or no pybind11: Megatron-LM's own first run decides
    cached = os.path.join(HELPERS_CACHE, key, name)
    if not os.path.isfile(cached):
        env = dict(os.environ, PATH=os.pathsep.join([bindir, os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
        try:
            done = subprocess.run(["make", "-C", datasets], env=env, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError):  # no make here, or a build that hangs
            return  # the first run compiles again and reports what fails
        if done.returncode != 0 or not os.path.isfile(os.path.join(datasets, name)):
            return
        try:
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            partial = f"{cached}.{os.getpid()}"
            shutil.copy(os.path.join(datasets, name), partial)
            os.replace(partial, cached)  # whole or not at all: another session may be reading it
        except OSError:
            pass
        return
    shutil.copy(cached, os.path.join(datasets, name))  # a fresh mtime: newer than helpers.cpp


def run(tree: str, nproc: int, args: list, *, cpu_flag: bool = True, timeout: float = RUN_TIMEOUT_S,
        expect_ok: bool = True, launcher: str = None, te: bool = False, gpus: int = 0,
        megatron_defaults: bool = False, fp8_device: str = None, rank_setup: tuple = None,
        sft: bool = False) -> Result:
    """pretrain_gpt.py on `nproc` CPU ranks with TINY + args; parsed log. The ranks are forked
    from this tree's import-once process, or started by torchrun (`launcher="torchrun"` or
    PRIMUS_TEST_TORCHRUN=1; PRIMUS_TEST_TORCHRUN=0 forks them whatever the test asks). Every rank is killed if the run outlives `timeout`.

    `te`: TransformerEngine layers (`--transformer-impl transformer_engine`), the test-only stand-in
    (tests/te_standin) installed as the `transformer_engine` package for this run alone (first on
    PYTHONPATH; those runs have an import-once process of their own).

    `megatron_defaults`: TINY without the options CPU mode sets itself (--no-persist-layer-norm,
    --num-workers 0): Megatron-LM's defaults, which a user's dry run keeps.

    `fp8_device` (with `te`): the TE stand-in answers as that FP8 device ("sm90": a Hopper; "gfx942": an
    MI300 with the FNUZ formats) in every rank, so Megatron-LM's --fp8-format runs; without it the
    stand-in answers as a CPU does (no FP8), whatever this process's environment says.

    `rank_setup`: (module in tests/, function, *args), called by every rank before pretrain_gpt.py runs
    (a test that breaks the runtime on purpose: tests/fp8_breakages.py); forked ranks only.

    `sft`: Megatron-LM's --sft data (the caller gives --sft, --data-path and its tokenizer): TINY without
    its mock data and NullTokenizer, and the test-only `datasets` and `transformers` stand-ins
    (tests/sft_standin) first on PYTHONPATH for this run alone."""
    bindir, sitedir = (os.path.join(os.path.dirname(tree), d) for d in ("bin", "site"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PRIMUS_", "TORCHELASTIC_"))}
    env.update(PATH=os.pathsep.join([bindir, os.path.dirname(sys.executable), env.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join([*([TE_STANDIN] if te else []), *([SFT_STANDIN] if sft else []), ROOT, sitedir,
                                           env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               OMP_NUM_THREADS="1", CUDA_DEVICE_MAX_CONNECTIONS="1", PYTHONWARNINGS="ignore")
    env.pop(TE_STANDIN_FP8_ENV, None)
    if fp8_device:
        assert te, "fp8_device emulates an FP8 device in the TE stand-in: run(te=True)"
        env[TE_STANDIN_FP8_ENV] = fp8_device
    tiny = [*TINY[:TINY.index("--transformer-impl")], "--transformer-impl", "transformer_engine",
            *TINY[TINY.index("--transformer-impl") + 2:]] if te else TINY
    if sft:  # the caller's data and tokenizer instead of the mock data's
        tiny = [a for a in tiny if a != "--mock-data"]
        for option in ("--tokenizer-type", "--vocab-size"):
            tiny = tiny[:tiny.index(option)] + tiny[tiny.index(option) + 2:]
    if megatron_defaults:
        tiny = [a for a in tiny if a != "--no-persist-layer-norm"]
        tiny = tiny[:tiny.index("--num-workers")] + tiny[tiny.index("--num-workers") + 2:]
    argv = [*(["--cpu"] if cpu_flag else []), *tiny, *_data_cache(tree, args), *args]
    launcher = launcher or ("torchrun" if os.environ.get("PRIMUS_TEST_TORCHRUN") == "1" and not rank_setup
                            else "fork")
    if launcher == "torchrun" and os.environ.get("PRIMUS_TEST_TORCHRUN") == "0":
        launcher = "fork"  # torchrun on one CI leg only (module docstring)
    assert not rank_setup or launcher == "fork", "rank_setup runs in forked ranks only"
    if launcher == "nodes":  # the GPU check on fewer GPUs than ranks: benchmarks/rank_launch.py
        code, out = _nodes(tree, nproc, argv, env, timeout, gpus)
    elif launcher == "torchrun":
        code, out = _torchrun(tree, nproc, argv, env, timeout)
    else:
        setup = rank_setup and {"path": os.path.join(ROOT, "tests"), "module": rank_setup[0], "call": rank_setup[1],
                                "args": list(rank_setup[2:])}
        code, out = _forked(tree, nproc, argv, env, timeout, setup)
    if code is None:
        raise AssertionError(f"pretrain_gpt.py {' '.join(args)} did not finish in {timeout:g} s:\n{tail(out)}")
    result = parse(out)
    if expect_ok and code != 0:
        raise AssertionError(f"pretrain_gpt.py {' '.join(args)} exited with {code}:\n{tail(out)}")
    result.returncode = code
    return result


def print_parsed_arguments(words_json: str) -> None:
    """A `rank_setup` that parses `words` (a JSON list) with Megatron-LM's own parser and our plugin's
    options, as pretrain() parses first, prints `PARSED {name: str(value)}` and ends the rank (exit status 0)
    before pretrain_gpt.py runs: a command line checked in a forked rank instead of an interpreter that
    imports Megatron-LM for it (about 10 s of CPU)."""
    from megatron.training.arguments import parse_args

    from primus_megatron import megatron_lm

    sys.argv = ["pretrain_gpt.py", *json.loads(words_json)]
    args = parse_args(extra_args_provider=megatron_lm.extra_args_provider(None))
    print("PARSED " + json.dumps({k: str(v) for k, v in vars(args).items()}), flush=True)
    sys.exit(0)


def save_start(tree: str, nproc: int, args: list, path: str, **kwargs) -> str:
    """One iteration of megatron's own schedule on `args`, saved at `path` (returned): the start every run
    of a comparison loads with --finetune (Megatron-LM seeds each pipeline rank's initialisation, so a V
    placement would start from other weights). `kwargs` as run()'s."""
    run(tree, nproc, [*args, "--train-iters", "1", "--eval-interval", "1000", "--save", path, "--save-interval", "1"],
        **kwargs)
    return path


def _data_cache(tree: str, args: list) -> list:
    """Megatron-LM's index cache (--data-cache-path) beside the tree, unless the run names its own: the
    mock data's document, sample and shuffle indices (about 2 million samples a split, built by every
    rank that reads data, a tenth of a tiny run's CPU) are built once per configuration and loaded by
    later runs, as a user's repeated runs load them. The same indices either way."""
    if "--data-cache-path" in args:
        return []
    return ["--data-cache-path", os.path.join(os.path.dirname(tree), "data-cache")]


def _torchrun(tree: str, nproc: int, argv: list, env: dict, timeout: float):
    """(exit status or None on time-out, output) of `torchrun --standalone pretrain_gpt.py`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "pretrain_gpt.py", *argv]
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return None, proc.communicate()[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _nodes(tree: str, nproc: int, argv: list, env: dict, timeout: float, gpus: int):
    """(exit status or None on time-out, output) of pretrain_gpt.py with each rank a one-GPU node
    of its own on `gpus` shared GPUs (benchmarks/rank_launch.py)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import rank_launch

    log = os.path.join(os.path.dirname(tree), f"nodes-{time.monotonic_ns()}.log")
    launch = rank_launch.Launch(["pretrain_gpt.py", *argv], env, tree, nproc, log, shared=True, gpus=gpus)
    deadline = time.monotonic() + timeout
    while (code := launch.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    if code is None:
        launch.stop_with_stacks()
    return code, launch.output()


class _Forks:
    """This session's import-once process for one tree (megatron_lm_forks.py) and its replies."""

    def __init__(self, tree: str, env: dict):
        self.log = os.path.join(os.path.dirname(tree), "forks.log")
        self.proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "megatron_lm_forks.py")],
                                     cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(self.log, "a"), start_new_session=True)
        self.buffer = b""
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def reply(self, deadline: float):
        """The next reply, or None when `deadline` (monotonic) passes or the process is gone."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


_FORKS: dict = {}


def _forked(tree: str, nproc: int, argv: list, env: dict, timeout: float, setup: dict = None):
    """(exit status or None on time-out, output) of a run forked from the tree's import-once process
    (`setup`: megatron_lm_forks.py's test-only call in each rank)."""
    key = (tree, env["PYTHONPATH"])  # what the process imported depends on its path (the TE stand-in)
    forks = _FORKS.get(key)
    if forks is None or forks.proc.poll() is not None:
        forks = _FORKS[key] = _Forks(tree, env)
    log = os.path.join(os.path.dirname(tree), "run.log")
    request = {"argv": argv, "nproc": nproc, "env": env, "log": log, **({"setup": setup} if setup else {})}
    forks.proc.stdin.write((json.dumps(request) + "\n").encode())
    forks.proc.stdin.flush()
    deadline = time.monotonic() + timeout + 120  # + the imports, when this is the process's first run
    started = forks.reply(deadline)
    if started is None:
        forks.close()
        with open(forks.log) as f:
            raise AssertionError(f"the import-once process for {tree} did not start a run:\n{tail(f.read())}")
    ended = forks.reply(time.monotonic() + timeout)
    if ended is None:
        _kill_launch(forks, started["pid"])
    with open(log) as f:
        out = f.read()
    return (None if ended is None else ended["code"]), out


def _kill_launch(forks: _Forks, launcher: int) -> None:
    """End a launch that ran out of time, and return only when none of its ranks runs: SIGALRM asks
    the launcher to SIGKILL its ranks and reap them (so its own exit, which the import-once process
    reports, comes after theirs); if it does not answer, its whole process group is SIGKILLed. A
    SIGKILLed process takes a moment to die, and orphans are reaped by init whenever it gets to them,
    so the group is then watched until only zombies are left in it."""
    try:
        os.kill(launcher, signal.SIGALRM)
    except ProcessLookupError:
        pass
    if forks.reply(time.monotonic() + 15) is None:
        try:
            os.killpg(launcher, signal.SIGKILL)
        except ProcessLookupError:
            pass
        forks.reply(time.monotonic() + 30)
    deadline = time.monotonic() + 30
    while _live_members(launcher) and time.monotonic() < deadline:
        time.sleep(0.05)


def _live_members(pgid: int) -> list:
    """The pids of process group `pgid` that are not zombies (from /proc: field 3 is the state,
    field 5 the group; the name in field 2 may hold spaces, so fields count from its closing ')')."""
    live = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            live.append(int(entry))
    return live


def arg(result: Result, name: str) -> str:
    """An argument's value as Megatron-LM's argument dump at start-up prints it."""
    m = re.search(rf"^\s+{name} \.+ (\S+)", result.log, re.M)
    assert m, f"{name} not in Megatron-LM's argument dump"
    return m.group(1)


def combined_pairs(result: Result, schedule: str, args: list, pp: int = 2, microbatches: int = 4) -> tuple:
    """(the overlapped F&B pairs pipeline rank 0's plan of `schedule` has, planned with the `--pipeline-costs`
    in `args` if any; the counts rank 0 logged running, each as one call of megatron-core's combined step)."""
    from primus_megatron import schedules as S
    from primus_megatron.options import parse_costs

    costs = parse_costs(args[args.index("--pipeline-costs") + 1]) if "--pipeline-costs" in args else None
    planned = len(S.generate(schedule, pp, microbatches, costs=costs).paired(0))
    ran = re.findall(rf"{schedule}: (\d+) overlapped F&B pairs ran on pipeline rank 0, each as one call of "
                     r"megatron-core's combined_forward_backward_step", result.log)
    return planned, [int(n) for n in ran]


def routed(result: Result) -> list:
    """(routed TE layers, grouped experts among them) of each model chunk on rank 0 (the plugin's line)."""
    return [(int(a), int(b)) for a, b in re.findall(
        r"(\d+) TransformerEngine layers defer their weight gradients to W ops, (\d+) of them grouped experts",
        result.log)]


def tail(text: str, n: int = 80) -> str:
    """The last lines of a log, with Megatron-LM's argument dump and warnings left out."""
    lines = [line for line in (text or "").splitlines()
             if not re.match(r"^\s+\S+ \.{3,} ", line) and "Warning" not in line and "warnings.warn" not in line]
    errors = [line for line in lines if re.search(r"Error|error:|Timeout|Exception", line)][:8]
    logged = [line.strip()[:160] for line in lines if _ITER.search(line) or _VALID.search(line)][-2:]
    return "\n".join(lines[-n:] + (["--- first error lines ---"] + errors if errors else [])
                     + ["--- last iteration lines logged ---"] + (logged or ["(none)"]))


class TEPipelineRuns:
    """pretrain_gpt.py with TE layers (the stand-in) at pp=2 from one shared start, for every test module
    that compares schedules on it (test_megatron_lm_te.py in bf16, test_megatron_lm_fp8.py in FP8), so a
    session saves the start and runs megatron's own bf16 1F1B once. Every run loads the start with
    --finetune: Megatron-LM seeds each pipeline rank's initialisation, so V placements would start from
    other weights. bf16 as examples/slurm/pretrain_gpt.sbatch's default GPU run; 4 microbatches, ITERS
    iterations, the validation and test losses after training (EVAL_AFTER_TRAINING)."""

    ITERS = 3
    NPROC = 2
    MODEL = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "8", "--bf16"]  # the start's and every run's
    FP8 = []  # what every FP8 run adds to --fp8-format and --fp8-recipe
    FIXED = ["--pipeline-profile-steps", "0"]  # equal-cost plans: the numbers cannot depend on a measured plan
    FP8_DEVICE = "sm90"  # the stand-in answers as a Hopper: the OCP float8 formats

    def __init__(self, tree: str, work: str) -> None:
        self.tree, self.work = tree, work
        self._start = None
        self._runs: dict = {}

    def start(self) -> str:
        """One iteration of megatron's own schedule with TE layers in bf16, saved (no FP8 state in it:
        an FP8 run starts with TE's initial scales, whatever schedule it runs)."""
        if self._start is None:
            self._start = save_start(self.tree, self.NPROC, self.MODEL, os.path.join(self.work, "start"), te=True)
        return self._start

    def args(self, schedule: str = None, fp8_recipe: str = None) -> list:
        return [*self.MODEL, "--train-iters", str(self.ITERS), *EVAL_AFTER_TRAINING,
                "--load", self.start(), "--finetune",
                *(["--pipeline-schedule", schedule, *self.FIXED] if schedule else []),
                *(["--fp8-format", "hybrid", "--fp8-recipe", fp8_recipe, *self.FP8] if fp8_recipe else [])]

    def __call__(self, schedule: str = None, fp8_recipe: str = None, rank_setup: tuple = None) -> Result:
        """Megatron's own 1F1B (`schedule` None) or ours, in bf16 or `--fp8-format hybrid` with
        `fp8_recipe`; cached unless `rank_setup` (megatron_lm_forks.py's test-only call) changes the run."""
        key = (schedule, fp8_recipe)
        if rank_setup is None and key in self._runs:
            return self._runs[key]
        result = run(self.tree, self.NPROC, self.args(schedule, fp8_recipe), te=True,
                     fp8_device=self.FP8_DEVICE if fp8_recipe else None, rank_setup=rank_setup)
        if rank_setup is None:
            self._runs[key] = result
        return result


class MoEPipelineRuns(TEPipelineRuns):
    """The same for Megatron-LM's MoE recipe with TE grouped experts (TEGroupedMLP over TE's GroupedLinear,
    --moe-grouped-gemm; a shared expert; the all-to-all dispatcher over EP=2, the load-balancing loss) on 4
    ranks, DP=2 x PP=2 x EP=2 with overlapped reduce, the distributed optimizer, overlapped parameter gathers
    and gradient-accumulation fusion, bf16: test_megatron_lm_moe.py's runs in bf16 and
    test_megatron_lm_fp8.py's in FP8 (with --moe-router-padding-for-fp8: each expert's tokens padded to
    TE's FP8 GEMM alignment, as Megatron-LM's FP8 MoE recipes run) from one start."""

    NPROC = 4
    MOE = ["--num-experts", "4", "--moe-router-topk", "2", "--moe-token-dispatcher-type", "alltoall",
           "--expert-model-parallel-size", "2", "--moe-aux-loss-coeff", "1e-2", "--disable-bias-linear"]
    TE_MOE = MOE + ["--moe-grouped-gemm", "--moe-shared-expert-intermediate-size", "64"]
    DP2PP2 = ["--pipeline-model-parallel-size", "2", "--global-batch-size", "16",
              "--untie-embeddings-and-output-weights", "--overlap-grad-reduce", "--use-distributed-optimizer",
              "--overlap-param-gather", "--bf16"]  # 4 microbatches per data-parallel rank
    MODEL = DP2PP2 + TE_MOE
    FP8 = ["--moe-router-padding-for-fp8"]
