"""patches/apply_patch.sh: the patch of the checkout's own tag or version, all hunks or none.

Each test works on the three files the script reads (pretrain_gpt.py, megatron/core/package_info.py,
megatron/training/arguments.py) of Megatron-LM core_v0.16.1 and core_v0.19.0, taken once per module
from the unmodified snapshots in ../shared/megatron-lm/ (tests/megatron_lm_harness.py). The
e2e tests apply the script to whole trees (megatron_lm_harness.prepare) and train with the result.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tarfile

import pytest

import megatron_lm_harness as H

APPLY = os.path.join(H.PATCHES, "apply_patch.sh")
TAGS = ("core_v0.16.1", "core_v0.19.0")
FILES = ("pretrain_gpt.py", "megatron/core/package_info.py", "megatron/training/arguments.py")


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """{tag: folder with the tag's FILES}, unpacked once."""
    out = tmp_path_factory.mktemp("mlm-files")
    for tag in TAGS:
        snapshot = os.path.join(H.SNAPSHOTS, f"Megatron-LM-{tag}.tar.gz")
        if not os.path.isfile(snapshot):
            pytest.fail(f"the Megatron-LM snapshot {snapshot} is missing (see ../shared/megatron-lm/README.md)")
        with tarfile.open(snapshot) as tar:
            members = [tar.getmember(f"Megatron-LM-{tag}/{f}") for f in FILES]
            tar.extractall(out, members=members, filter="data")
    return {tag: out / f"Megatron-LM-{tag}" for tag in TAGS}


@pytest.fixture
def checkout(snapshots, tmp_path):
    def make(tag):
        tree = tmp_path / tag
        shutil.copytree(snapshots[tag], tree)
        return tree
    return make


def apply(tree, *flags):
    proc = subprocess.run(["bash", APPLY, *flags, str(tree)], capture_output=True, text=True, timeout=60)
    return proc.returncode, proc.stdout + proc.stderr


def listing(tree):
    return sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))


@pytest.mark.parametrize("tag", TAGS)
def test_each_tag_gets_its_own_patch_by_its_version(checkout, snapshots, tag):
    """No tag to read (a copy without .git): package_info's version picks the patch (core_v0.19.0's
    says 0.19.1, its major.minor picks the core_v0.19.0 patch); after it, pretrain_gpt.py calls the
    plugin; a second run changes nothing."""
    tree = checkout(tag)
    rc, out = apply(tree, "--check")
    assert rc == 1 and "is not patched" in out and f"megatron-lm-{tag}-pretrain_gpt.patch" in out, out
    rc, out = apply(tree)
    assert rc == 0 and f"megatron-lm-{tag}-pretrain_gpt.patch (Megatron-LM {tag})" in out, out
    text = (tree / "pretrain_gpt.py").read_text()
    assert "    primus_pipeline.install()" in text and "primus_pipeline.extra_args_provider(" in text
    assert "primus_pipeline.finish()" in text
    assert listing(tree) == listing(snapshots[tag])  # no .orig or .rej left behind
    assert apply(tree, "--check") == (0, "")
    rc, out = apply(tree)
    assert rc == 0 and "nothing to do" in out and (tree / "pretrain_gpt.py").read_text() == text


def test_the_git_tag_picks_the_patch(checkout):
    """A git checkout exactly at a tag we have a patch for: the tag decides, whatever package_info says."""
    tree = checkout("core_v0.16.1")
    info = tree / "megatron" / "core" / "package_info.py"
    info.write_text(info.read_text().replace("MINOR = 16", "MINOR = 99"))
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-C", str(tree)]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "snapshot"], ["tag", "core_v0.16.1"]):
        subprocess.run(git + cmd, check=True, capture_output=True, timeout=60)
    rc, out = apply(tree)
    assert rc == 0 and "megatron-lm-core_v0.16.1-pretrain_gpt.patch" in out, out


def test_a_failing_hunk_leaves_the_file_untouched(checkout, snapshots):
    """core_v0.16.1's file with a local edit in the context of the patch's second hunk: the first hunk
    (the import) would apply, the second fails; nothing is written, no .rej or .orig is left."""
    tree = checkout("core_v0.16.1")
    script = tree / "pretrain_gpt.py"
    edited = script.read_text().replace("args_defaults={'tokenizer_type': 'GPT2BPETokenizer'},",
                                        "args_defaults={'tokenizer_type': 'HuggingFaceTokenizer'},")
    assert edited != script.read_text()
    script.write_text(edited)
    rc, out = apply(tree)
    assert rc == 1 and "does not apply" in out and "nothing was changed" in out and "Hunk #2 FAILED" in out, out
    assert "Hunk #1 FAILED" not in out  # the import hunk alone would have gone in
    assert script.read_text() == edited and listing(tree) == listing(snapshots["core_v0.16.1"])


def test_a_half_patched_checkout_is_named_with_the_right_patch(checkout):
    """The issue's case: core_v0.19.0 patched by hand with core_v0.16.1's patch, whose import hunk
    lands while the install() hunk fails. The check fails (an import is not the plugin's install call),
    names core_v0.19.0's patch, and the script refuses to patch over it."""
    tree = checkout("core_v0.19.0")
    old = os.path.join(H.PATCHES, "megatron-lm-core_v0.16.1-pretrain_gpt.patch")
    proc = subprocess.run(["patch", "-p1", "-i", old], cwd=tree, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "from primus_megatron import" in (tree / "pretrain_gpt.py").read_text()
    for flags in (("--check",), ()):
        rc, out = apply(tree, *flags)
        assert rc == 1 and "half-patched" in out and "megatron-lm-core_v0.19.0-pretrain_gpt.patch" in out, out
        assert "core_v0.16.1-pretrain_gpt.patch" not in out


def test_amds_fork_is_refused_by_name(checkout):
    """ROCm/Megatron-LM: its pretrain_gpt.py carries AMD's copyright (and its own argument hook,
    get_patch_args); refused by name, pointing at NVIDIA's tags, the file untouched."""
    tree = checkout("core_v0.16.1")
    script = tree / "pretrain_gpt.py"
    script.write_text("# Copyright (c) 2025, Advanced Micro Devices, Inc. All rights reserved.\n" + script.read_text())
    before = script.read_text()
    rc, out = apply(tree)
    assert rc == 1 and "ROCm/Megatron-LM" in out and "core_v0.16.1 or core_v0.19.0" in out, out
    assert script.read_text() == before
    tree = checkout("core_v0.19.0")  # the fork's argument hook alone
    args = tree / "megatron" / "training" / "arguments.py"
    args.write_text(args.read_text() + "\n\ndef get_patch_args(parser):\n    return parser\n")
    rc, out = apply(tree, "--check")
    assert rc == 1 and "ROCm/Megatron-LM" in out, out


def test_a_version_without_a_patch_is_refused(checkout):
    tree = checkout("core_v0.19.0")
    info = tree / "megatron" / "core" / "package_info.py"
    info.write_text(info.read_text().replace("MINOR = 19", "MINOR = 17"))
    rc, out = apply(tree)
    assert rc == 1 and "megatron-core is 0.17.1" in out and "core_v0.16.1 or core_v0.19.0" in out, out
    rc, out = apply(tree.parent / "nowhere")
    assert rc == 1 and "has no pretrain_gpt.py" in out and "Traceback" not in out
