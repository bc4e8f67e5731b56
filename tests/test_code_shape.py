"""The package's shape (issue 42): no function in primus_megatron/ longer than 80 lines."""
from __future__ import annotations

import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "primus_megatron")
MAX_LINES = 80


def test_no_function_is_longer_than_80_lines():
    long = []
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        lines = node.end_lineno - node.lineno + 1
                        if lines > MAX_LINES:
                            long.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_LINES} lines: {long}"


# the floors below the runtime (what they may not import: anything above them)
LOWER = ("options.py", "unsupported.py", "schedules", "compat", "balancing")
UPPER = ("runtime", "optim", "train", "emulation", "megatron_lm", "cli")


def _imports(path: str, tree: ast.AST) -> list:
    """The primus_megatron submodules a file imports, as top-level names (relative imports resolved)."""
    package = os.path.relpath(os.path.dirname(path), os.path.dirname(ROOT)).split(os.sep)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
                names = [parts + [a.name] for a in node.names] if not node.module else [parts]
            else:
                names = [node.module.split(".")] if node.module else []
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        out += [n[1] for n in names if len(n) > 1 and n[0] == "primus_megatron"]
    return out


def test_nothing_below_the_runtime_imports_from_above_it():
    """The schedules, the option spec, the refusal table, the compatibility shims and the data
    balancing do not import the runtime, the optimizer, the training script, the emulated devices,
    the Megatron-LM plugin or the CLI, not even lazily (issue 42: options.py once looked refusals
    up in the runtime)."""
    upward = []
    for lower in LOWER:
        top = os.path.join(ROOT, lower)
        paths = [top] if lower.endswith(".py") else [os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs
                                                    if f.endswith(".py")]
        for path in paths:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            upward += [f"{os.path.relpath(path, ROOT)} -> {name}" for name in _imports(path, tree)
                       if name.split(".")[0] in UPPER or name.removesuffix(".py") in UPPER]
    assert not upward, f"imports from above: {upward}"


def test_the_runtime_imports_nothing_that_drives_it():
    """The runtime (and the optimizer beside it) is driven by the training script, the emulated
    devices, the Megatron-LM plugin and the CLI; it imports none of them, not even lazily."""
    upward = []
    for lower in ("runtime", "optim"):
        top = os.path.join(ROOT, lower)
        for path in (os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs if f.endswith(".py")):
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            upward += [f"{os.path.relpath(path, ROOT)} -> {name}" for name in _imports(path, tree)
                       if name.split(".")[0] in ("train", "emulation", "megatron_lm", "cli")]
    assert not upward, f"imports from above: {upward}"
