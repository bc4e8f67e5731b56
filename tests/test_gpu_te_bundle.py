"""The TransformerEngine bundle (`make gpu-te-bundle`, benchmarks/gpu_te_bundle.py), checked without a GPU.

What a GPU machine that reaches no package index gets in one device call must load there: this
unpacks the bundle built on this machine and checks, with no GPU and without downloading anything,

* that it fits a device call beside the repository and is what its manifest says, built from the
  pinned inputs (requirements-gpu-te.txt and the binding's pinned source package);
* that TE's core library holds GPU code for the H200 only: sm_90 and sm_90a cubins, no PTX, as CUDA's
  own cuobjdump lists them, and a kept cubin extracts whole (cuobjdump unpacks it to a CUDA ELF);
* that every symbol the compiled torch binding leaves undefined is defined where it will be at run
  time: by the core (loaded first, globally, by TE's import), by torch 2.11.0's libraries or the CUDA
  13 libraries torch's wheel pins, by libpython3.12, or by the C and C++ runtimes at versions a
  manylinux_2_28 system has; that it links only torch's and the system's libraries; that the core
  links only what torch's CUDA packages ship; and that the binding speaks torch's pybind11 ABI;
* that TE's own import-time checks (`transformer_engine/common/__init__.py`: the metapackage from a
  wheel, the cu13 core and the torch binding at one version, each shared library found once)
  pass on the unpacked tree, run as TE runs them with its library loading left out;
* that the rest travels: pydantic and its parts, einops, megatron-core, Megatron-LM's pretrain_gpt.py,
  and not TE's JAX part.

Skipped (an expected skip: `no-te-bundle`) where no bundle has been built: `make gpu-te-bundle`
builds one (about 2.2 GB of downloads, 20 CPU-minutes of compiling), which this test never does.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

import expected_skips

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import fatbin  # noqa: E402
import gpu_te  # noqa: E402
import gpu_te_bundle as B  # noqa: E402

BUNDLE, MANIFEST = B.bundle_paths()
pytestmark = pytest.mark.skipif(
    not (os.path.isfile(BUNDLE) and os.path.isfile(MANIFEST)),
    reason=expected_skips.reason("no-te-bundle", "no TransformerEngine bundle is built on this machine: "
                                 "`make gpu-te-bundle` builds it (this test never downloads)"))

# The newest symbol versions a manylinux_2_28 system (glibc 2.28, GCC 8's libstdc++) provides.
SYSTEM_VERSIONS = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 25), "CXXABI": (1, 3, 11), "GCC": (7, 0, 0)}
SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libstdc++.so.6",
               "libgcc_s.so.1", "ld-linux-x86-64.so.2"}
TORCH_LIBS = {"libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so"}
EM_CUDA = 190


@pytest.fixture(scope="module")
def manifest() -> dict:
    with open(MANIFEST) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def work() -> B.Work:
    work = B.Work(os.path.dirname(BUNDLE))
    needed = [work.path("exports", "symbols.json.gz"), B.cuobjdump_path(work)]
    missing = [p for p in needed if not os.path.isfile(p)]
    if missing:
        pytest.fail(f"the bundle's build cache lacks {missing}: run `make gpu-te-bundle` again (it resumes)")
    return work


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> str:
    """The bundle unpacked as `make gpu-te` unpacks it on the GPU machine (gpu_te.unpack)."""
    where = str(tmp_path_factory.mktemp("te-bundle"))
    gpu_te.unpack(BUNDLE, where)
    return where


def _site(tree: str, *parts: str) -> str:
    return os.path.join(tree, "site", *parts)


def _dynamic(path: str, *flags: str) -> list:
    out = subprocess.run(["nm", "-D", *flags, path], capture_output=True, text=True, check=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def _needed(path: str) -> set:
    out = subprocess.run(["readelf", "-dW", path], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))


def test_the_bundle_fits_a_device_call_and_is_what_its_manifest_says(manifest, tree):
    size = os.path.getsize(BUNDLE)
    assert size < B.LIMIT_MIB * 2**20, f"{size / 2**20:.1f} MiB"
    with open(BUNDLE, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == manifest["bundle"]["sha256"]
    with open(os.path.join(tree, "manifest.json")) as f:
        inside = json.load(f)
    assert inside == {k: v for k, v in manifest.items() if k != "bundle"}
    assert (manifest["transformer_engine"], manifest["torch"]) == ("2.11.0", "2.11.0+cu130")
    pins = {digest for _version, digest in B.pinned().values()} | {B.SDIST[2]}
    assert pins <= set(manifest["inputs"].values()), "an input is not the pinned one"


def test_the_core_holds_only_hopper_cubins(work, tree, manifest, tmp_path):
    core = _site(tree, B.CORE)
    listed = B.gpu_code(B.cuobjdump_path(work), core)
    assert not listed["ptx"], listed["ptx"][:5]
    assert set(listed["elf"]) == {"sm_90", "sm_90a"}, sorted(set(listed["elf"]))
    # every kernel file of the original kept its sm_90 cubin, and only that (the original listed
    # sm_75 ... sm_120 and PTX, manifest "before"); our own reading of the containers agrees
    assert len(listed["elf"]) == manifest["steps"]["core"]["kept"] == len(fatbin.listing(core))
    assert {"sm_75", "sm_100", "sm_120"} <= set(manifest["steps"]["core"]["before"]["elf"])
    # a kept cubin comes out whole: cuobjdump unpacks (and decompresses) it into a CUDA ELF
    subprocess.run([B.cuobjdump_path(work), "-xelf", "libtransformer_engine.1.sm_90.cubin", core],
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)
    with open(tmp_path / "libtransformer_engine.1.sm_90.cubin", "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == EM_CUDA


def _system_version(symbol_version: str):
    """(family, version numbers) of a glibc / libstdc++ / libgcc symbol version, else None."""
    family, _, number = symbol_version.partition("_")
    if family not in SYSTEM_VERSIONS or not re.fullmatch(r"[0-9.]+", number):
        return None
    return family, tuple(int(n) for n in number.split("."))


def test_every_symbol_the_binding_needs_is_defined_where_it_will_be(work, tree):
    binding = _site(tree, B.BINDING)
    with gzip.open(work.path("exports", "symbols.json.gz"), "rt") as f:
        exports = json.load(f)
    defined = {name for names in exports.values() for name in names}
    defined |= {fields[-1].split("@")[0] for fields in _dynamic(_site(tree, B.CORE), "--defined-only")}
    unresolved, too_new = [], []
    for fields in _dynamic(binding, "--undefined-only"):
        kind, symbol = fields[-2], fields[-1]
        name, _, version = symbol.partition("@")
        if kind in ("w", "v"):  # weak: resolved when present, fine when absent
            continue
        system = _system_version(version.lstrip("@"))
        if system:
            if system[1] > SYSTEM_VERSIONS[system[0]]:
                too_new.append(symbol)
        elif name not in defined:
            unresolved.append(name)
    assert not unresolved, f"{len(unresolved)} undefined, e.g. {unresolved[:8]}"
    assert not too_new, f"newer than manylinux_2_28: {too_new[:8]}"
    assert _needed(binding) <= TORCH_LIBS | SYSTEM_LIBS, _needed(binding)
    cuda = {lib for lib in exports if not lib.startswith(("libtorch", "libc10", "libpython"))}
    assert _needed(_site(tree, B.CORE)) <= cuda | SYSTEM_LIBS, _needed(_site(tree, B.CORE)) - cuda - SYSTEM_LIBS


def test_the_binding_speaks_torchs_pybind11_abi(work, tree):
    with open(work.path("exports.json")) as f:
        torch_ids = set(json.load(f)["pybind11_internals"])
    with open(_site(tree, B.BINDING), "rb") as f:
        ids = {i.decode() for i in re.findall(rb"__pybind11_internals_v\d+[A-Za-z0-9_]*__", f.read())}
    assert torch_ids and ids == torch_ids, (ids, torch_ids)


TE_CHECKS = """
import importlib.util, json, sys
from importlib.metadata import version
spec = importlib.util.spec_from_file_location("te_common", sys.argv[1])
common = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)  # NVTE_PROJECT_BUILDING=1: defines the checks, loads no library
common.sanity_checks_for_pypi_installation()
print(json.dumps({
    "core": common.get_te_core_package_info(),
    "torch_binding": common._is_package_installed("transformer_engine_torch"),
    "from_wheel": common._is_package_installed_from_wheel("transformer_engine"),
    "versions": [version("transformer_engine_torch"), version("transformer-engine")],
    "core_lib": str(common._get_shared_object_file("core")),
    "torch_lib": str(common._get_shared_object_file("torch")),
}))
"""


def test_tes_own_import_checks_pass_on_the_unpacked_tree(tree):
    """transformer_engine/common/__init__.py's checks, run as TE's import runs them (load_framework_extension's
    asserts: metapackage from a wheel, core and binding installed, one version), on this tree alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NVTE_FRAMEWORK")}
    env.update(PYTHONPATH=_site(tree), NVTE_PROJECT_BUILDING="1", PYTHONNOUSERSITE="1")
    done = subprocess.run([sys.executable, "-S", "-c", TE_CHECKS,  # -S: nothing but the tree and the stdlib
                           _site(tree, "transformer_engine", "common", "__init__.py")],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tree)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["core"] == [True, "transformer-engine-cu13", "2.11.0"]
    assert found["torch_binding"] and found["from_wheel"] and found["versions"] == ["2.11.0", "2.11.0"]
    assert found["core_lib"] == _site(tree, B.CORE) and found["torch_lib"] == _site(tree, B.BINDING)


def test_what_travels_beside_te(tree):
    site = _site(tree)
    for module in ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "einops",
                   "megatron/core", "transformer_engine/pytorch"):
        assert os.path.isdir(os.path.join(site, module)), module
    assert any(n.endswith("cpython-312-x86_64-linux-gnu.so") for n in os.listdir(os.path.join(site, "pydantic_core")))
    assert not os.path.exists(os.path.join(site, "transformer_engine", "jax"))  # the image's JAX would import it
    assert os.path.isfile(os.path.join(tree, "Megatron-LM-core_v0.19.0", "pretrain_gpt.py"))
