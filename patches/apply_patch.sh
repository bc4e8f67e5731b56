#!/usr/bin/env bash
# Patch a Megatron-LM checkout's pretrain_gpt.py for primus_megatron, all hunks or none.
#
#   patches/apply_patch.sh /path/to/Megatron-LM           pick the checkout's patch, apply it, check it
#   patches/apply_patch.sh --check /path/to/Megatron-LM   is it patched? (what the sbatch asks; changes nothing)
#
# The patch is chosen by the checkout itself: its git tag when HEAD is exactly at one we have a patch
# for, else its megatron-core version (megatron/core/package_info.py: core_v0.19.0's says 0.19.1,
# so a version picks the patch of its major.minor). `patch --dry-run` runs first and nothing is
# written unless every hunk applies; the patched file must then call the plugin's install() and
# extra_args_provider(), else the original is put back. AMD's fork (ROCm/Megatron-LM) is refused by
# name: its pretrain_gpt.py and megatron-core differ from the NVIDIA tags the patches and install()
# are tested on (docs/amd.md). Exit status 0: patched (now or before); 1: refused, one sentence.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NAME=patches/apply_patch.sh

die() { echo "$NAME: error: $*" >&2; exit 1; }

CHECK=0
[[ ${1:-} == --check ]] && { CHECK=1; shift; }
(($# == 1)) || die "usage: $NAME [--check] MEGATRON_LM_DIR (a Megatron-LM checkout, the folder holding pretrain_gpt.py)"
DIR=$1
[[ -f $DIR/pretrain_gpt.py ]] || die "$DIR has no pretrain_gpt.py: give the Megatron-LM checkout's top folder"
DIR=$(cd "$DIR" && pwd)
SCRIPT=$DIR/pretrain_gpt.py

supported() {  # the tags we have a patch for: "core_v0.16.1 or core_v0.19.0"
    local p out=""
    for p in "$HERE"/megatron-lm-core_v*-pretrain_gpt.patch; do
        p=${p##*/megatron-lm-}
        out+="${out:+ or }${p%-pretrain_gpt.patch}"
    done
    echo "$out"
}

is_rocm_fork() {  # AMD's fork: its remote, the AMD copyright its pretrain_gpt.py carries, or its argument hook
    git -C "$DIR" remote -v 2>/dev/null | grep -qi 'rocm/megatron-lm' && return 0
    grep -q 'Advanced Micro Devices' "$SCRIPT" && return 0
    grep -q '^def get_patch_args' "$DIR/megatron/training/arguments.py" 2>/dev/null
}

core_version() {  # "0.19.1" from the checkout's megatron/core/package_info.py; empty if absent
    local f=$DIR/megatron/core/package_info.py v part
    [[ -f $f ]] || return 0
    v=""
    for part in MAJOR MINOR PATCH; do
        v+=$(sed -n "s/^$part *= *\([0-9][0-9]*\).*/\1/p" "$f" | head -1).
    done
    [[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+\.$ ]] && echo "${v%.}"
}

choose_patch() {  # prints "TAG PATCHFILE" for this checkout, or fails with the reason on stdout
    local tag version p mm
    tag=$(git -C "$DIR" describe --tags --exact-match 2>/dev/null || true)
    if [[ -n $tag && -f $HERE/megatron-lm-$tag-pretrain_gpt.patch ]]; then
        echo "$tag $HERE/megatron-lm-$tag-pretrain_gpt.patch"
        return 0
    fi
    version=$(core_version)
    [[ -n $version ]] || { echo "its version is unknown (no git tag we have a patch for, no megatron/core/package_info.py)"; return 1; }
    mm=${version%.*}
    for p in "$HERE"/megatron-lm-core_v"$mm".*-pretrain_gpt.patch; do
        [[ -f $p ]] || continue
        tag=${p##*/megatron-lm-}
        echo "${tag%-pretrain_gpt.patch} $p"
        return 0
    done
    echo "its megatron-core is $version${tag:+ (tag $tag)}, for which there is no patch"
    return 1
}

# The plugin's own calls, not an import line: a half-applied patch leaves the import behind.
plugin_alias() { sed -n 's/^from primus_megatron import megatron_lm as \([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$1" | head -1; }
is_patched() {
    local alias
    alias=$(plugin_alias "$1")
    [[ -n $alias ]] && grep -Eq "^[[:space:]]+$alias\.install\(\)" "$1" \
        && grep -Eq "$alias\.extra_args_provider\(" "$1"
}

if is_rocm_fork; then
    die "$DIR is AMD's fork of Megatron-LM (ROCm/Megatron-LM), which primus_megatron does not support (its pretrain_gpt.py and megatron-core differ from the NVIDIA tags our patches are tested on): use NVIDIA's Megatron-LM at $(supported), which runs on ROCm (docs/amd.md)"
fi
if ! chosen=$(choose_patch); then
    die "no patch for the Megatron-LM at $DIR: $chosen; patches exist for $(supported) (check one out: git -C $DIR checkout TAG)"
fi
TAG=${chosen%% *}
PATCH=${chosen#* }

if is_patched "$SCRIPT"; then
    ((CHECK)) || echo "$SCRIPT already calls primus_megatron's install(): nothing to do"
    exit 0
fi
if [[ -n $(plugin_alias "$SCRIPT") ]] || grep -q primus_megatron "$SCRIPT" || [[ -e $SCRIPT.rej ]]; then
    die "$SCRIPT is half-patched (it names primus_megatron but never calls its install() and extra_args_provider()): restore it (git -C $DIR checkout pretrain_gpt.py) and run $HERE/apply_patch.sh $DIR, which applies ${PATCH##*/} (Megatron-LM $TAG) whole or not at all"
fi
if ((CHECK)); then
    die "$SCRIPT is not patched: run $HERE/apply_patch.sh $DIR (it applies ${PATCH##*/}, for Megatron-LM $TAG)"
fi

# All hunks or none: a dry run first (no fuzz: context lines must match the tag's exactly), then
# the real run on a file backed up beforehand, put back unless the plugin's calls are there after.
if ! out=$(cd "$DIR" && patch -p1 --dry-run --forward --fuzz=0 -i "$PATCH" 2>&1); then
    die "${PATCH##*/} does not apply to $SCRIPT (a hunk fails: the file differs from Megatron-LM $TAG's); nothing was changed. patch said: $(grep -E 'FAILED|malformed|can.t find' <<<"$out" | head -3 | paste -sd' ' -)"
fi
backup=$(mktemp)
trap 'rm -f "$backup"' EXIT
cp -p "$SCRIPT" "$backup"
if ! out=$(cd "$DIR" && patch -p1 --forward --fuzz=0 --no-backup-if-mismatch -r - -s -i "$PATCH" 2>&1) \
    || ! is_patched "$SCRIPT"; then
    cp -p "$backup" "$SCRIPT"
    die "applying ${PATCH##*/} to $SCRIPT failed after its dry run passed; the original is back. patch said: $out"
fi
echo "patched $SCRIPT with ${PATCH##*/} (Megatron-LM $TAG): it calls primus_megatron.megatron_lm.install()"
