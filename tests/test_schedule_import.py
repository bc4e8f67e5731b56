"""The planner is pure Python: it imports and runs without torch."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CODE = """
import sys
import primus_megatron.schedules as s
from primus_megatron.schedules import export
for name in s.names():
    if name != 'zb-optimal':
        s.generate(name, 4, 8)
s.simulate(s.generate('zbv', 4, 8))
export.to_json(s.generate('zb-auto', 4, 8))
bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'megatron')))
assert not bad, bad
print('ok')
"""


def run(code: str, *extra_path: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((ROOT, *extra_path)))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_planner_imports_without_torch():
    out = run(CODE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_planner_runs_when_torch_cannot_be_imported(tmp_path):
    """A `torch` that raises on import is first on the path: the planner must not touch it."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch must not be imported by the planner')\n")
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + CODE
    out = run(code)
    assert out.returncode == 0, out.stderr
    # and the poisoned torch really is what `import torch` would find
    check = run(f"import sys; sys.path.insert(0, {str(tmp_path)!r})\ntry:\n import torch\nexcept ImportError as e: print(e)")
    assert "must not be imported" in check.stdout
