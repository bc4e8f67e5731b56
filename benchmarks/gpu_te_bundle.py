"""The TransformerEngine bundle (`make gpu-te-bundle`): TE 2.11.0 for one Hopper GPU machine that reaches
no package index, built on a CPU machine as one compressed file that travels in one device call.

    python benchmarks/gpu_te_bundle.py            # build (or finish building) the bundle; prints where it is
    python benchmarks/gpu_te_bundle.py --where    # print the bundle's path (exit 1 when not built)

What it does, each step cached under ~/.cache/primus_megatron/te-bundle/ (outside the clone; `--cache`),
so a failure late redoes nothing before it (downloads and the cut stay):

1. download: the pinned wheels of requirements-gpu-te.txt (pip download --require-hashes, CPython 3.12,
   manylinux x86_64, no dependencies) and TE's torch binding, a source package (pinned URL and sha256);
2. core: TE's core library (`libtransformer_engine.so`, 442 MiB, GPU code for sm_75 to sm_120 and PTX)
   with its fat binaries kept to the sm_90 / sm_90a cubins (benchmarks/fatbin.py), the rest zeroed;
3. headers: torch 2.11.0's and the CUDA 13 wheels' include directories;
4. compile: the binding's 28 .cpp files with g++ (`nice -n 19`, `--jobs`, default 1: the machine is
   shared), as torch's CppExtension would (C++17, -O3, hidden visibility, the extension's name); one
   object per file, so an interrupted build compiles only what is missing;
5. link: `transformer_engine_torch.cpython-312-x86_64-linux-gnu.so` against torch's libc10, libtorch,
   libtorch_cpu and libtorch_python, its references to glibc kept to glibc 2.28's (`GLIBC_COMPAT_C`),
   stripped;
6. exports: the dynamic symbols torch's and the CUDA wheels' libraries and libpython3.12 define, and
   the pybind11 internals id torch was built with (for the content test, tests/test_gpu_te_bundle.py);
7. pack: `site/` (TE's Python files without its JAX part, the three distributions' metadata TE's
   import checks read, the cut core, the binding, pydantic & co., einops, megatron-core 0.19.2) and
   Megatron-LM core_v0.19.0's `megatron/` and top-level scripts (for `pretrain_gpt.py`), as a sparse
   tar (the zeroed GPU code takes no bytes) compressed with xz; a manifest beside it and inside it
   (versions, the sha256 of every input, sizes, what was cut).

`make gpu-te` (benchmarks/gpu_te.py) unpacks it on the GPU machine; docs/transformer-engine.md says how
it travels. Needs g++, binutils (nm, strip), tar, xz and a Python 3.12 (scripts/find_python312.sh) for
its headers; about 20 CPU-minutes of compiling.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from typing import Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import fatbin  # noqa: E402

TE_VERSION = "2.11.0"
TORCH_VERSION = "2.11.0"  # PyPI's Linux wheel: the cu130 build, the GPU image's torch
NAME = f"gpu-te-{TE_VERSION}-torch{TORCH_VERSION}-cu130-cp312-sm90"
PINS = os.path.join(ROOT, "requirements-gpu-te.txt")
SDIST = ("transformer_engine_torch-2.11.0.tar.gz",
         "https://files.pythonhosted.org/packages/09/42/068a40f5b213a3a8899e3885eb178776662897abed03cd725953d1106c39/"
         "transformer_engine_torch-2.11.0.tar.gz",
         "b58d6322bdf885dfab0646da572aff9cf090b332ad470559aa58883c231e1816")
MEGATRON_LM = os.path.join(os.path.dirname(ROOT), "shared", "megatron-lm", "Megatron-LM-core_v0.19.0.tar.gz")
KEEP_SM = 90  # the H200's: sm_90 and sm_90a cubins, no PTX
PLATFORMS = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_24", "manylinux_2_18", "manylinux_2_17",
             "manylinux2014", "manylinux_2_12", "manylinux2010", "manylinux_2_5", "manylinux1")
BINDING = "transformer_engine_torch.cpython-312-x86_64-linux-gnu.so"
CORE = "transformer_engine/wheel_lib/libtransformer_engine.so"
# the wheels whose files travel in site/ (unpacked as pip would; megatron-core's compiled helpers included)
SITE_WHEELS = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions", "einops",
               "megatron_core")
# the wheels whose shared libraries the binding may take symbols from (torch's own CUDA packages)
LIB_WHEELS = ("torch", "nvidia_cuda_runtime", "nvidia_cublas", "nvidia_cusparse", "nvidia_cusolver",
              "nvidia_curand", "nvidia_cuda_nvrtc", "nvidia_nvtx", "nvidia_cudnn_cu13", "nvidia_nccl_cu13")
HEADER_WHEELS = LIB_WHEELS + ("nvidia_cuda_crt", "nvidia_cuda_cccl")


def default_cache() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "primus_megatron", "te-bundle")


def bundle_paths(cache: Optional[str] = None) -> tuple[str, str]:
    """(bundle, manifest) paths of the built bundle under `cache`."""
    cache = cache or os.environ.get("PRIMUS_TE_BUNDLE_CACHE") or default_cache()
    return os.path.join(cache, f"{NAME}.tar.xz"), os.path.join(cache, f"{NAME}.manifest.json")


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def log(message: str) -> None:
    print(f"gpu_te_bundle: {message}", flush=True)


def _cpu_seconds() -> float:
    import resource

    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


class Work:
    """The cache: downloads/ (shared by every bundle) and work/<NAME>/, one finished step per stamp file
    (`<step>.json`, what the step recorded), so a rerun starts at the first unfinished step."""

    def __init__(self, cache: str) -> None:
        self.cache = cache
        self.downloads = os.path.join(cache, "downloads")
        self.dir = os.path.join(cache, "work", NAME)
        os.makedirs(self.downloads, exist_ok=True)
        os.makedirs(self.dir, exist_ok=True)

    def path(self, *parts: str) -> str:
        return os.path.join(self.dir, *parts)

    def step(self, name: str, run: Callable[[], dict]) -> dict:
        stamp = self.path(f"{name}.json")
        if os.path.isfile(stamp):
            with open(stamp) as f:
                return json.load(f)
        log(f"{name} ...")
        started, cpu = datetime.datetime.now(), _cpu_seconds()
        record = run()
        record["seconds"] = round((datetime.datetime.now() - started).total_seconds(), 1)
        record["cpu_seconds"] = round(_cpu_seconds() - cpu, 1)  # this process and the tools it ran
        with open(stamp + ".tmp", "w") as f:
            json.dump(record, f, indent=1)
        os.replace(stamp + ".tmp", stamp)
        log(f"{name} done in {record['seconds']:.0f} s")
        return record


# -- 1. download ---------------------------------------------------------------------------------

def pinned() -> dict:
    """{distribution (normalised), (version, sha256)} from requirements-gpu-te.txt."""
    pins = {}
    with open(PINS) as f:
        for line in f:
            found = re.match(r"^([A-Za-z0-9_.-]+)==(\S+) --hash=sha256:([0-9a-f]{64})", line.strip())
            if found:
                pins[re.sub(r"[-_.]+", "_", found.group(1)).lower()] = (found.group(2), found.group(3))
    return pins


def download(work: Work) -> dict:
    platforms = [a for p in PLATFORMS for a in ("--platform", f"{p}_x86_64")]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
                    "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", *platforms,
                    "-d", work.downloads, "-r", PINS], check=True)
    name, url, digest = SDIST
    target = os.path.join(work.downloads, name)
    if not os.path.isfile(target) or sha256(target) != digest:
        with urllib.request.urlopen(url, timeout=300) as response, open(target + ".part", "wb") as out:
            shutil.copyfileobj(response, out)
        if sha256(target + ".part") != digest:
            raise RuntimeError(f"{url} does not have the pinned sha256 {digest}")
        os.replace(target + ".part", target)
    files = {}
    for dist, (version, digest) in pinned().items():
        path = wheel(work, dist)
        if sha256(path) != digest:
            raise RuntimeError(f"{path} does not have the pinned sha256 {digest}")
        files[os.path.basename(path)] = digest
    files[SDIST[0]] = SDIST[2]
    return {"files": files}


def wheel(work: Work, dist: str) -> str:
    """The downloaded wheel of a pinned distribution (normalised name)."""
    version = pinned()[dist][0]
    for name in sorted(os.listdir(work.downloads)):
        if name.endswith(".whl") and name.lower().startswith(f"{dist}-{version}-"):
            return os.path.join(work.downloads, name)
    raise FileNotFoundError(f"no wheel of {dist} {version} in {work.downloads}")


def unzip(archive: str, into: str, keep: Callable[[str], bool]) -> list:
    """Extract the members `keep` accepts (executable bits kept); their names."""
    names = []
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            if info.is_dir() or not keep(info.filename):
                continue
            target = z.extract(info, into)
            mode = info.external_attr >> 16
            if mode & 0o111:
                os.chmod(target, mode & 0o777)
            names.append(info.filename)
    return names


# -- 2. the core, cut to Hopper -----------------------------------------------------------------

def cuobjdump_path(work: Work) -> str:
    return work.path("tools", "nvidia", "cu13", "bin", "cuobjdump")


def cuobjdump(work: Work) -> str:
    """CUDA's cuobjdump, from its pinned wheel (kept in the cache: the content test runs it too)."""
    tool = cuobjdump_path(work)
    if not os.path.isfile(tool):
        unzip(wheel(work, "nvidia_cuda_cuobjdump"), work.path("tools"), lambda n: n.endswith("/bin/cuobjdump"))
    return tool


def gpu_code(tool: str, library: str) -> dict:
    """{"elf": [...], "ptx": [...]}: the targets (sm_90, sm_90a, ...) of a library's GPU code, in cuobjdump's
    order, as cuobjdump lists them."""
    found = {}
    for kind in ("elf", "ptx"):
        out = subprocess.run([tool, f"--list-{kind}", library], capture_output=True, text=True, check=True).stdout
        found[kind] = re.findall(rf"\.(sm_[0-9]+[a-z]?)\.{'cubin' if kind == 'elf' else 'ptx'}$", out, re.M)
    return found


def cut_core(work: Work) -> dict:
    unzip(wheel(work, "transformer_engine_cu13"), work.path("core"), lambda n: n == CORE)
    path = work.path("core", CORE)
    before = gpu_code(cuobjdump(work), path)
    offset, size = fatbin.section(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        data = bytearray(f.read(size))
        counts = fatbin.keep_only(data, lambda e: e.kind == fatbin.ELF and e.sm == KEEP_SM)
        f.seek(offset)
        f.write(data)
    subprocess.run(["strip", "--strip-unneeded", path], check=True)
    after = gpu_code(cuobjdump(work), path)
    if after["ptx"] or not after["elf"] or set(after["elf"]) - {f"sm_{KEEP_SM}", f"sm_{KEEP_SM}a"}:
        raise RuntimeError(f"the cut left GPU code other than sm_{KEEP_SM} / sm_{KEEP_SM}a: {after}")
    return {"before": {k: sorted(set(v)) for k, v in before.items()}, "elf_before": len(before["elf"]),
            "ptx_before": len(before["ptx"]), "elf_after": len(after["elf"]), **counts,
            "bytes": os.path.getsize(path), "sha256": sha256(path)}


# -- 3-5. headers, compile, link ----------------------------------------------------------------

def headers(work: Work) -> dict:
    into = work.path("headers")
    count = 0
    for dist in HEADER_WHEELS:
        count += len(unzip(wheel(work, dist), into,
                           lambda n: n.startswith("torch/include/") or re.match(r"nvidia/[^/]+/include/", n)))
    with tarfile.open(os.path.join(work.downloads, SDIST[0])) as tar:
        tar.extractall(work.path("sdist"), filter="data")
    unzip(wheel(work, "torch"), work.path("torchlib"), lambda n: re.match(r"torch/lib/lib[^/]+\.so", n))
    return {"files": count}


def python312() -> str:
    found = subprocess.run([os.path.join(ROOT, "scripts", "find_python312.sh")], capture_output=True, text=True)
    if found.returncode != 0:
        raise RuntimeError(found.stderr.strip())
    return found.stdout.strip()


def include_dirs(work: Work, python: str) -> list:
    h = work.path("headers")
    src = work.path("sdist", f"transformer_engine_torch-{TE_VERSION}")
    py = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                        capture_output=True, text=True, check=True).stdout.strip()
    cuda = [os.path.join(h, "nvidia", d, "include") for d in sorted(os.listdir(os.path.join(h, "nvidia")))]
    # TE's setup.py order: the CUDA headers, then its own common headers and csrc
    return [*cuda, os.path.join(h, "nvidia", "cu13", "include", "cccl"), os.path.join(src, "common_headers"),
            os.path.join(src, "common_headers", "common"), os.path.join(src, "common_headers", "common", "include"),
            os.path.join(src, "csrc"), os.path.join(h, "torch", "include"),
            os.path.join(h, "torch", "include", "torch", "csrc", "api", "include"), py]


# torch's CppExtension flags for g++ (torch 2.11 utils/cpp_extension.py) and TE's own (build_tools/pytorch.py)
CXXFLAGS = ["-std=c++17", "-fPIC", "-O3", "-g0", "-DNDEBUG", "-fvisibility=hidden", "-DTORCH_API_INCLUDE_EXTENSION_H",
            "-DTORCH_EXTENSION_NAME=transformer_engine_torch", "-w"]


def sources(work: Work) -> list:
    csrc = work.path("sdist", f"transformer_engine_torch-{TE_VERSION}", "csrc")
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(csrc) for f in fs if f.endswith(".cpp"))


def _object(work: Work, source: str) -> str:
    csrc = work.path("sdist", f"transformer_engine_torch-{TE_VERSION}", "csrc")
    return work.path("objects", os.path.relpath(source, csrc).replace(os.sep, "__")[:-4] + ".o")


def compile_one(work: Work, source: str, includes: list) -> Optional[str]:
    """Compile one file unless its object exists (written under a temporary name, then renamed);
    None, or the compiler's complaint."""
    obj = _object(work, source)
    if os.path.isfile(obj):
        return None
    cmd = ["nice", "-n", "19", "g++", *CXXFLAGS, *(f"-I{d}" for d in includes), "-c", source, "-o", obj + ".tmp"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return f"{os.path.basename(source)}: {done.stderr[-3000:]}"
    os.replace(obj + ".tmp", obj)
    log(f"compiled {os.path.basename(source)}")
    return None


def compile_all(work: Work, jobs: int) -> dict:
    os.makedirs(work.path("objects"), exist_ok=True)
    includes = include_dirs(work, python312())
    files = sources(work)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        failures = [f for f in pool.map(lambda s: compile_one(work, s, includes), files) if f]
    if failures:
        raise RuntimeError("compiling the binding failed:\n" + "\n".join(failures))
    return {"sources": len(files), "flags": CXXFLAGS, "compiler": _first_line(["g++", "--version"])}


# The binding is compiled here (Debian 12: glibc 2.36, GCC 12) for a GPU image that may be older: its
# references to glibc are kept to what glibc 2.28 (manylinux_2_28) defines. dlopen, dlsym and dlclose
# are bound to their GLIBC_2.2.5 versions (glibc 2.34 moved them into libc under a new version) and
# libstdc++'s inline "is the process single-threaded" test, which reads glibc 2.32's
# __libc_single_threaded, always answers no (atomic reference counts: right in any process).
GLIBC_COMPAT_C = """
__asm__(".symver dlopen_v2_2_5, dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym_v2_2_5, dlsym@GLIBC_2.2.5");
__asm__(".symver dlclose_v2_2_5, dlclose@GLIBC_2.2.5");
extern void *dlopen_v2_2_5(const char *file, int mode);
extern void *dlsym_v2_2_5(void *handle, const char *name);
extern int dlclose_v2_2_5(void *handle);
#define HIDDEN __attribute__((visibility("hidden")))
HIDDEN void *__wrap_dlopen(const char *file, int mode) { return dlopen_v2_2_5(file, mode); }
HIDDEN void *__wrap_dlsym(void *handle, const char *name) { return dlsym_v2_2_5(handle, name); }
HIDDEN int __wrap_dlclose(void *handle) { return dlclose_v2_2_5(handle); }
HIDDEN char __wrap___libc_single_threaded = 0;
"""
WRAPPED = ("dlopen", "dlsym", "dlclose", "__libc_single_threaded")


def link(work: Work) -> dict:
    objects = sorted(_object(work, s) for s in sources(work))
    compat = work.path("glibc_compat.c")
    with open(compat, "w") as f:
        f.write(GLIBC_COMPAT_C)
    subprocess.run(["gcc", "-O2", "-fPIC", "-c", compat, "-o", compat[:-2] + ".o"], check=True)
    out = work.path(BINDING)
    # torch's CppExtension libraries (c10, torch, torch_cpu, torch_python); libdl named for a glibc before
    # 2.34, where dlopen lives there
    subprocess.run(["nice", "-n", "19", "g++", "-shared", "-Wl,-O1", "-o", out + ".tmp", *objects, compat[:-2] + ".o",
                    "-Wl,--wrap=" + ",--wrap=".join(WRAPPED), "-Wl,--no-as-needed", "-l:libdl.so.2",
                    f"-L{work.path('torchlib', 'torch', 'lib')}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"],
                   check=True)
    subprocess.run(["strip", "--strip-unneeded", out + ".tmp"], check=True)
    os.replace(out + ".tmp", out)
    return {"bytes": os.path.getsize(out), "sha256": sha256(out), "glibc_wrapped": list(WRAPPED)}


def _first_line(cmd: list) -> str:
    return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0]


# -- 6. the exports the content test checks the binding against ---------------------------------

def defined_symbols(path: str) -> list:
    """The dynamic symbols a shared library defines (names, without versions)."""
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return sorted({line.split()[-1].split("@")[0] for line in out.splitlines() if len(line.split()) >= 3})


def exports(work: Work) -> dict:
    into = work.path("exports")
    os.makedirs(into, exist_ok=True)
    libs = {}
    for dist in LIB_WHEELS:
        tmp = work.path("libs-tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        for name in unzip(wheel(work, dist), tmp, lambda n: re.search(r"/lib/lib[^/]+\.so[.0-9]*$", n)):
            libs[os.path.basename(name)] = defined_symbols(os.path.join(tmp, name))
        shutil.rmtree(tmp)
    py = python312()
    libdir = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    libs["libpython3.12.so"] = defined_symbols(os.path.join(libdir, "libpython3.12.so"))
    with gzip.open(os.path.join(into, "symbols.json.gz"), "wt") as f:
        json.dump(libs, f)
    with open(work.path("torchlib", "torch", "lib", "libtorch_python.so"), "rb") as f:
        ids = sorted(set(re.findall(rb"__pybind11_internals_v\d+[A-Za-z0-9_]*__", f.read())))
    return {"libraries": sorted(libs), "pybind11_internals": [i.decode() for i in ids]}


# -- 7. stage and pack ---------------------------------------------------------------------------

def _binding_metadata(site: str) -> None:
    """transformer_engine_torch's metadata as pip would leave it: TE's import check
    (`transformer_engine.common.load_framework_extension`) compares its version with the other two."""
    info = os.path.join(site, f"transformer_engine_torch-{TE_VERSION}.dist-info")
    os.makedirs(info, exist_ok=True)
    files = {"METADATA": f"Metadata-Version: 2.1\nName: transformer_engine_torch\nVersion: {TE_VERSION}\n"
                         f"Summary: TransformerEngine's torch binding, compiled by primus_megatron's gpu_te_bundle.py "
                         f"against torch {TORCH_VERSION}+cu130\nRequires-Dist: transformer_engine_cu13=={TE_VERSION}\n",
             "WHEEL": "Wheel-Version: 1.0\nGenerator: primus_megatron gpu_te_bundle.py\nRoot-Is-Purelib: false\n"
                      "Tag: cp312-cp312-linux_x86_64\n",
             "INSTALLER": "primus_megatron-gpu_te_bundle\n", "top_level.txt": "transformer_engine_torch\n"}
    for name, text in files.items():
        with open(os.path.join(info, name), "w") as f:
            f.write(text)
    record = [f"{BINDING},,"] + [f"{os.path.basename(info)}/{n},," for n in (*files, "RECORD")]
    with open(os.path.join(info, "RECORD"), "w") as f:
        f.write("\n".join(record) + "\n")


def stage(work: Work, megatron_lm: str) -> str:
    root = work.path("stage")
    shutil.rmtree(root, ignore_errors=True)
    site = os.path.join(root, "site")
    # TE's Python files (the metapackage's and the core's are the same files) without its JAX part: the
    # GPU image has JAX, and TE imports its JAX binding, which is not built, whenever JAX imports
    unzip(wheel(work, "transformer_engine"), site, lambda n: not n.startswith("transformer_engine/jax/"))
    unzip(wheel(work, "transformer_engine_cu13"), site,
          lambda n: n.startswith(("transformer_engine/common/include/", "transformer_engine_cu13-")))
    os.makedirs(os.path.join(site, os.path.dirname(CORE)), exist_ok=True)
    shutil.copy2(work.path("core", CORE), os.path.join(site, CORE))
    # the zeroed GPU code made holes: tar stores a sparse file as its data alone, and the GPU machine's
    # unpacking writes only that (util-linux's fallocate; without it the archive holds the zeros, xz'd)
    if shutil.which("fallocate"):
        subprocess.run(["fallocate", "--dig-holes", os.path.join(site, CORE)], check=True)
    shutil.copy2(work.path(BINDING), os.path.join(site, BINDING))
    _binding_metadata(site)
    for dist in SITE_WHEELS:
        unzip(wheel(work, dist), site, lambda n: True)
    with tarfile.open(megatron_lm) as tar:  # what pretrain_gpt.py runs from: megatron/ and the top-level scripts
        top = tar.getnames()[0].split("/")[0]
        keep = [m for m in tar.getmembers() if m.isfile() and (m.name.startswith(f"{top}/megatron/") or (
            m.name.count("/") == 1 and m.name.endswith((".py", "LICENSE"))))]
        tar.extractall(root, members=keep, filter="data")
    return root


def pack(work: Work, megatron_lm: str, records: dict, out: str, manifest_path: str) -> dict:
    root = stage(work, megatron_lm)
    manifest = {"name": NAME, "built": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "transformer_engine": TE_VERSION, "torch": f"{TORCH_VERSION}+cu130", "python": "3.12",
                "platform": "linux x86_64 (glibc of the build machine: " + _first_line(["ldd", "--version"]) + ")",
                "gpu_code": f"sm_{KEEP_SM} and sm_{KEEP_SM}a cubins only",
                "inputs": {**records["download"]["files"], os.path.basename(megatron_lm): sha256(megatron_lm)},
                "contents": sorted(os.listdir(root)), "steps": records}
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    # GNU tar keeps the zeroed GPU code as holes (none of its bytes stored), xz -9 the rest
    tar = subprocess.Popen(["tar", "--sparse", "--format=gnu", "--sort=name", "--owner=0",
                            "--group=0", "--numeric-owner", "--mtime=@0", "-cf", "-", "-C", root,
                            *sorted(os.listdir(root))], stdout=subprocess.PIPE)
    with open(out + ".tmp", "wb") as f:
        xz = subprocess.run(["nice", "-n", "19", "xz", "-9", "-T1", "-c"], stdin=tar.stdout, stdout=f)
    if tar.wait() != 0 or xz.returncode != 0:
        raise RuntimeError("packing the bundle failed (tar or xz)")
    manifest["bundle"] = {"file": os.path.basename(out), "bytes": os.path.getsize(out + ".tmp"),
                          "sha256": sha256(out + ".tmp"), "unpacked_bytes": _tree_bytes(root)}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(out + ".tmp", out)
    return manifest["bundle"]


def _tree_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


LIMIT_MIB = 60  # a device call carries 64 MiB: the bundle and the repository


def build(cache: str, jobs: int, megatron_lm: str) -> dict:
    work = Work(cache)
    records = {"download": work.step("download", lambda: download(work))}
    records["core"] = work.step("core", lambda: cut_core(work))
    records["headers"] = work.step("headers", lambda: headers(work))
    records["compile"] = work.step("compile", lambda: compile_all(work, jobs))
    records["link"] = work.step("link", lambda: link(work))
    records["exports"] = work.step("exports", lambda: exports(work))
    out, manifest = bundle_paths(cache)
    if os.path.isfile(out) and os.path.isfile(manifest):
        with open(manifest) as f:
            built = json.load(f)
        if built["steps"] == records and built["inputs"].get(os.path.basename(megatron_lm)) == sha256(megatron_lm):
            log("the bundle is up to date")  # from these very steps: nothing to pack again
            return built["bundle"]
    bundle = pack(work, megatron_lm, records, out, manifest)
    if bundle["bytes"] > LIMIT_MIB * 2**20:
        raise RuntimeError(f"the bundle is {bundle['bytes'] / 2**20:.1f} MiB, over the {LIMIT_MIB} MiB it may take")
    return bundle


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # bad input: one line naming the option, status 2
        print(f"gpu_te_bundle: error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None) -> int:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.environ.get("PRIMUS_TE_BUNDLE_CACHE") or default_cache(),
                        help="where downloads, steps and the bundle are kept "
                             "(default ~/.cache/primus_megatron/te-bundle)")
    parser.add_argument("--jobs", type=int, default=1, help="compiler processes at once (default 1; at most 2)")
    parser.add_argument("--megatron-lm", default=os.environ.get("MEGATRON_LM_TARBALL", MEGATRON_LM),
                        help="the Megatron-LM core_v0.19.0 snapshot (.tar.gz) whose pretrain_gpt.py travels")
    parser.add_argument("--where", action="store_true", help="print the built bundle's path; exit 1 if not built")
    args = parser.parse_args(argv)
    out, manifest = bundle_paths(args.cache)
    if args.where:
        print(out if os.path.isfile(out) and os.path.isfile(manifest) else "")
        return 0 if os.path.isfile(out) else 1
    if args.jobs not in (1, 2):
        parser.error(f"--jobs takes 1 or 2 (the machine is shared), got {args.jobs}")
    if not os.path.isfile(args.megatron_lm):
        parser.error(f"--megatron-lm names no file: {args.megatron_lm} (a Megatron-LM core_v0.19.0 .tar.gz)")
    missing = [tool for tool in ("g++", "gcc", "nm", "strip", "readelf", "tar", "xz", "nice") if not shutil.which(tool)]
    if missing:
        parser.error(f"the build needs {', '.join(missing)} on PATH")
    try:
        bundle = build(args.cache, args.jobs, args.megatron_lm)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
        print(f"gpu_te_bundle: {exc} (finished steps are kept in {Work(args.cache).dir}; run again to resume)",
              file=sys.stderr)
        return 1
    log(f"{out}: {bundle['bytes'] / 2**20:.1f} MiB ({bundle['unpacked_bytes'] / 2**20:.0f} MiB unpacked), "
        f"manifest {manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
