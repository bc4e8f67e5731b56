"""benchmarks/_common.py: the helpers every benchmark script writes its section and orders its
repetitions with (the scripts themselves run for minutes; these pieces are checked alone)."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import _common as C  # noqa: E402

DOC = """Title line of a benchmark.

    python benchmarks/x.py     # usage

How it measures, first paragraph.

Second paragraph.
"""


def test_a_section_is_the_command_then_its_parts_one_blank_line_apart():
    text = C.section("python benchmarks/x.py --quick", "Intro.\n", "", C.table(["a", "b"], [[1, "x|y"]]), "End.")
    assert text == ("Command (from the repository root, in the project's virtualenv):\n\n"
                    "```\npython benchmarks/x.py --quick\n```\n\n"
                    "Intro.\n\n| a | b |\n|---|---|\n| 1 | x\\|y |\n\nEnd.\n")


def test_the_command_line_leaves_out_where_the_section_is_written():
    # where the markdown goes does not change the numbers; every other option is kept, quoted
    argv = ["--quick", "--markdown", "/tmp/B.md", "--reps", "3", "--no-markdown", "--markdown=/tmp/C.md",
            "--variants", "zbv off"]
    assert C.command_line("benchmarks/x.py", argv) == "python benchmarks/x.py --quick --reps 3 --variants 'zbv off'"
    assert C.command_line("benchmarks/x.py", []) == "python benchmarks/x.py"


def test_the_parser_takes_the_first_paragraph_and_the_markdown_options():
    parser = C.parser(DOC)
    assert parser.description == "Title line of a benchmark."
    args = parser.parse_args(["--no-markdown"])
    assert args.no_markdown and args.markdown is None  # pytest is no benchmark script: no page of its own
    with pytest.raises(SystemExit, match="--markdown: this script has no page under docs/benchmarks/"):
        C.publish(parser.parse_args([]), "## T", "text", "x")
    assert C.method(DOC) == "How it measures, first paragraph.\n\nSecond paragraph."


def test_interleaved_repetitions_let_every_variant_lead_once_per_round():
    variants = ["a", "b", "c"]
    orders = [C.in_turn(variants, rep) for rep in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert C.in_turn(variants, 3) == variants  # the next round starts over
    assert [C.in_turn(("x", "y"), rep) for rep in range(2)] == [["x", "y"], ["y", "x"]]  # two alternate


def test_timed_returns_what_the_call_returned():
    seconds, out = C.timed(lambda: 42)
    assert out == 42 and seconds >= 0.0


def test_a_failed_command_is_named_with_its_stderr():
    C.run_checked([sys.executable, "-c", "print('ok')"], timeout_s=60)
    with pytest.raises(RuntimeError, match=r"exited with 3: .*broken"):
        C.run_checked([sys.executable, "-c", "import sys; sys.stderr.write('broken'); sys.exit(3)"], timeout_s=60)


def test_a_section_is_replaced_and_the_others_kept(tmp_path):
    path = str(tmp_path / "B.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("# Benchmarks\n\n## One\n\nold\n\n## Two\n\nkept\n")
    C.write_section(path, "## One", "new\n")
    C.write_section(path, "## Three", "added")
    with open(path, encoding="utf-8") as f:
        assert f.read() == "# Benchmarks\n\n## One\n\nnew\n\n## Two\n\nkept\n\n## Three\n\nadded\n"


def test_every_script_that_writes_a_section_has_its_page():
    """BENCHMARKS.md is the front page: a script writes its section into its docs/benchmarks page
    (`PAGES`), never into BENCHMARKS.md, and every page it names exists."""
    import glob
    import os

    writers = {os.path.basename(f) for f in glob.glob(os.path.join(C.ROOT, "benchmarks", "*.py"))
               if os.path.basename(f) != "_common.py"
               and any(w in open(f, encoding="utf-8").read() for w in ("publish(", "write_section(", "--markdown"))}
    assert writers and writers <= set(C.PAGES), sorted(writers - set(C.PAGES))
    for script, page in C.PAGES.items():
        assert os.path.exists(os.path.join(C.ROOT, "docs", "benchmarks", f"{page}.md")), (script, page)
