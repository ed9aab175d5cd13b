"""Every script in experiments/ still starts: `--help` exits 0 without a traceback, and none edits the
import path (they import the installed package). experiments/README.md gives each a purpose."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "experiments").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_experiment_answers_help(script):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "usage:" in out and "Traceback" not in out, out[-3000:]


def test_experiments_and_tools_leave_the_import_path_alone_and_are_listed():
    listed = (ROOT / "experiments" / "README.md").read_text(encoding="utf-8")
    for script in SCRIPTS + sorted((ROOT / "tools").glob("*.py")):
        assert "sys.path" not in script.read_text(encoding="utf-8"), script
    assert not [s.name for s in SCRIPTS if not re.search(rf"`{re.escape(s.name)}` \|", listed)]
    assert len([p for p in (ROOT / "tools").iterdir() if p.name != "__pycache__"]) <= 6
