#!/usr/bin/env bash
# Print the path of a Python 3.12 interpreter with the venv module, for the second test leg
# (megatron-core 0.17 and newer need Python >= 3.12). Looks at $PYTHON312, python3.12 on PATH,
# pyenv's versions and /usr/bin; on Debian/Ubuntu as root it installs python3.12 and
# python3.12-venv when the package index has them. Otherwise one sentence on stderr, exit 1.
set -u
usable() { [ -x "$1" ] && "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
candidates=()
[ -n "${PYTHON312:-}" ] && candidates+=("$PYTHON312")
command -v python3.12 >/dev/null 2>&1 && candidates+=("$(command -v python3.12)")
root="${PYENV_ROOT:-$HOME/.pyenv}"
for p in $(ls -d "$root"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V -r); do candidates+=("$p"); done
candidates+=(/usr/bin/python3.12 /usr/local/bin/python3.12)
for p in "${candidates[@]}"; do
    if usable "$p"; then echo "$p"; exit 0; fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if apt-cache show python3.12-venv >/dev/null 2>&1 \
            || { apt-get update -qq >/dev/null 2>&1 && apt-cache show python3.12-venv >/dev/null 2>&1; }; then
        apt-get install -y -qq python3.12 python3.12-venv >/dev/null 2>&1
        if usable /usr/bin/python3.12; then echo /usr/bin/python3.12; exit 0; fi
    fi
fi
echo "Python 3.12 with its venv module was not found (looked at \$PYTHON312, python3.12 on PATH, $root/versions/3.12*, /usr/bin and the system's package index): install it (for example 'pyenv install 3.12', or your distribution's python3.12 and python3.12-venv packages) or set PYTHON312=/path/to/python3.12" >&2
exit 1
