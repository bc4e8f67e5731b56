#!/usr/bin/env python3
"""Build the small English corpus shipped in primus_megatron/data/corpus/.

Two JSONL files, one document per line as ``{"text": ..., "source": ...}``
(the input format of Megatron-LM's tools/preprocess_data.py, key ``text``):

* ``licenses.jsonl``: every license text in /usr/share/common-licenses
  (symbolic links skipped), verbatim, one document per license.
* ``python_docstrings.jsonl``: the prose of the docstrings (module, class,
  function) of the Python standard library's top-level modules
  (``<stdlib>/*.py``), one document per docstring.  Paragraphs that look like
  code, doctest sessions, tables or option lists are dropped; the prose
  paragraphs that remain are re-flowed onto one line each and joined with a
  blank line.  Exact duplicate documents are kept once.

``LICENSE-PSF.txt`` is a copy of the Python license that ships with the
standard library the docstrings come from (the PSF license asks derived
works to retain it).

The output is deterministic for a given Python version and licenses
directory: inputs are read in sorted order, no timestamps are written.

    python scripts/build_corpus.py                 # writes primus_megatron/data/corpus/
    python scripts/build_corpus.py --out DIR --stdlib /path/to/lib/python3.11
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import sys
import sysconfig
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "primus_megatron", "data", "corpus")
DEFAULT_LICENSES = "/usr/share/common-licenses"

_WORD = re.compile(r"[A-Za-z][a-z]+(?:'[a-z]+)?")
_CODE_CHARS = set("()[]{}=<>_*|\\#@$%`~^")


def _license_documents(directory: str):
    docs = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        text = text.replace("\r\n", "\n")
        if text.strip():
            docs.append({"text": text, "source": f"common-licenses/{name}"})
    return docs


_BULLETS = ("* ", "- ", "+ ")
_CODE_RE = re.compile(r"\b(?:def|return|import|lambda|self\.)\s|\w\(\w*\)\.|==|->|::")


def _prose_text(paragraph: list[str], reference: bool = False) -> tuple[str, str] | None:
    """(kind, one-line text) for a paragraph of English sentences, else None.

    kind is "text", "lead" (prose ending with ':' that may introduce a list) or
    "item" (a bullet-list item, continuation lines indented under its text).
    ``reference``: the language reference's conventions: definition bodies are
    indented, *emphasis*, **strong** and "__dunder__" names are prose."""
    if not paragraph:
        return None
    kind = "text"
    lines = list(paragraph)
    if reference:
        indent = min(len(line) - len(line.lstrip(" ")) for line in lines)
        lines = [line[indent:] for line in lines]
        if lines[0].startswith("**"):
            lines[0] = lines[0].replace("**", "")
    if lines[0].startswith(_BULLETS):
        if not all(line.startswith("  ") and not line.startswith("   ") for line in lines[1:]):
            return None
        kind = "item"
        lines = [lines[0][2:]] + [line[2:] for line in lines[1:]]
    if any(line.startswith((" ", "\t")) for line in lines):  # code block, option list, table
        return None
    if any(line.lstrip().startswith((">>>", "...", "$ ", "%", "-", "*", "+", "|", "=", ":", "..", "#"))
           for line in lines):
        return None
    text = " ".join(line.strip() for line in lines)
    words = _WORD.findall(text)
    if len(text) < (20 if kind == "item" else 40) or len(words) < (3 if kind == "item" else 6):
        return None
    code_chars = _CODE_CHARS - set("*_") if reference else _CODE_CHARS
    if sum(ch in code_chars for ch in text) > (0.06 if reference else 0.04) * len(text):
        return None
    if sum(ch.isalpha() or ch.isspace() or (reference and ch in '*_"') for ch in text) < 0.85 * len(text):
        return None
    if kind != "item" and not (text[0].isupper() or text[0].isdigit() or text[0] in "\"'\u201c"):
        return None
    if _CODE_RE.search(text):
        return None
    if text.endswith(":") and kind == "text":
        kind = "lead"
    elif not text.endswith((".", "!", "?", ".)", ".'", '."', ".\u201d") + ((";", ",", ":") if kind == "item" else ())):
        return None  # an unfinished sentence, a heading, or an introduction to a code block
    return kind, ("* " + text if kind == "item" else text)


def _docstring_prose(doc: str, reference: bool = False) -> str:
    """The prose paragraphs of a docstring (or any reST-like text), re-flowed, blank-line separated.

    A paragraph ending with ':' is kept only when a kept bullet item follows it."""
    paragraphs, current = [], []
    for line in doc.expandtabs().split("\n"):
        if line.strip():
            current.append(line.rstrip())
        elif current:
            paragraphs.append(current)
            current = []
    if current:
        paragraphs.append(current)
    parsed = [_prose_text(p, reference) for p in paragraphs] + [None]
    kept = []
    for here, after in zip(parsed, parsed[1:]):
        if here is None:
            continue
        kind, text = here
        if kind == "lead" and (after is None or after[0] != "item"):
            continue
        if kind == "item" and not kept:
            continue  # a list without its introduction
        kept.append(text)
    return "\n\n".join(kept)


_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__", "__phello__"}


def _stdlib_sources(stdlib: str) -> list[str]:
    """Relative paths of the standard library's .py files, tests and build configuration excluded."""
    found = []
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith("config-")]
        for name in files:
            if name.endswith(".py") and not name.startswith("_sysconfigdata"):
                found.append(os.path.relpath(os.path.join(root, name), stdlib))
    return sorted(found, key=lambda rel: rel.split(os.sep))


def _docstring_documents(stdlib: str):
    docs, seen = [], set()
    for name in _stdlib_sources(stdlib):
        path = os.path.join(stdlib, name)
        with open(path, "rb") as f:
            source = f.read()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(source, filename=path)
        except SyntaxError:
            continue
        module = name[:-3].replace(os.sep, ".")
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        items = []

        def visit(node, qualname):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    items.append((qualname, doc))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(child, f"{qualname}.{child.name}")

        visit(tree, module)
        for qualname, doc in items:
            text = _docstring_prose(doc)
            if len(text) < 80:
                continue
            digest = hashlib.sha256(text.encode("utf-8")).digest()
            if digest in seen:
                continue
            seen.add(digest)
            docs.append({"text": text, "source": f"python{sys.version_info.major}.{sys.version_info.minor}"
                                                  f"/{name.replace(os.sep, '/')}:{qualname}"})
    return docs


def _reference_documents(stdlib: str):
    """The Python language reference topics that pydoc shows (pydoc_data/topics.py), prose only."""
    path = os.path.join(stdlib, "pydoc_data", "topics.py")
    if not os.path.isfile(path):
        return []
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), filename=path)
    topics = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "topics" for t in node.targets):
            topics = ast.literal_eval(node.value)
    docs = []
    for key in sorted(topics or {}):
        text = _docstring_prose(topics[key], reference=True)
        if len(text) >= 80:
            docs.append({"text": text, "source": f"python{sys.version_info.major}.{sys.version_info.minor}"
                                                  f"/pydoc_data/topics.py:{key}"})
    return docs


def _write_jsonl(path: str, docs) -> int:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for doc in docs:
            f.write(json.dumps(doc, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return os.path.getsize(path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    p.add_argument("--licenses", default=DEFAULT_LICENSES, help="license texts directory (default: %(default)s)")
    p.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"],
                   help="Python standard library directory (default: this interpreter's, %(default)s)")
    args = p.parse_args(argv)
    for option, path in (("--licenses", args.licenses), ("--stdlib", args.stdlib)):
        if not os.path.isdir(path):
            p.error(f"{option} {path} is not a directory")
    os.makedirs(args.out, exist_ok=True)

    licenses = _license_documents(args.licenses)
    docstrings = _docstring_documents(args.stdlib)
    reference = _reference_documents(args.stdlib)
    for name, docs in (("licenses.jsonl", licenses), ("python_docstrings.jsonl", docstrings),
                       ("python_reference.jsonl", reference)):
        size = _write_jsonl(os.path.join(args.out, name), docs)
        chars = sum(len(d["text"]) for d in docs)
        print(f"wrote {os.path.join(args.out, name)}: {len(docs)} documents, {chars} characters, {size} bytes")
    psf = os.path.join(args.stdlib, "LICENSE.txt")
    if os.path.isfile(psf):
        with open(psf, "rb") as f:
            data = f.read()
        dst = os.path.join(args.out, "LICENSE-PSF.txt")
        with open(dst + ".tmp", "wb") as f:
            f.write(data)
        os.replace(dst + ".tmp", dst)
        print(f"wrote {dst}: {len(data)} bytes (copy of {psf})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
