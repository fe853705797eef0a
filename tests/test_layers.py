"""The layers of docs/architecture.md are a contract the suite checks, not a convention.

``lint-imports`` (import-linter) reads the contracts in ``pyproject.toml``: each part imports only the
parts below it, the observatory imports nothing of the trainer (its chat panel's one import aside), the
run store never imports torch. A planted violation in a copy of the package must break them, and a data
build, its forked workers included, must never import torch. No function in ``src/`` passes 60 lines.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from cli_runner import SRC, subprocess_env

ROOT = SRC.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
MAX_FUNCTION_LINES = 60

# Records every attempt to import the package PROBED (torch), in this process and in any process forked
# from it (they inherit sys.meta_path), with the pid and the glasslab line that asked; then lets the
# import go on as usual.
IMPORT_PROBE = """
import os, sys, traceback

class ImportProbe:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == os.environ["PROBED"]:
            ours = [f for f in traceback.extract_stack() if "glasslab" in f.filename]
            where = f"{ours[-1].filename}:{ours[-1].lineno}" if ours else "?"
            with open(os.environ["PROBE_LOG"], "a") as log:
                log.write(f"{os.getpid()} {name} from {where}\\n")
        return None

sys.meta_path.insert(0, ImportProbe())
"""


def lint_imports(root: Path, **env: str) -> subprocess.CompletedProcess:
    assert LINT_IMPORTS.is_file(), "lint-imports is missing: pip install -e '.[dev]' (import-linter)"
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=root, env=subprocess_env(**env),
                          capture_output=True, text=True, timeout=120)


def test_the_layers_hold():
    checked = lint_imports(ROOT)
    assert checked.returncode == 0, checked.stdout[-4000:]
    assert "3 kept, 0 broken" in checked.stdout


def test_a_planted_import_breaks_the_contracts(tmp_path):
    """An import up the layers (data → ladder) and one from the page into the trainer, in a copy."""
    shutil.copytree(SRC / "glasslab", tmp_path / "src" / "glasslab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    plants = (("data/shards.py", "glasslab.ladder.plan"), ("observatory/series.py", "glasslab.train.run"))
    for module, planted in plants:
        with open(tmp_path / "src" / "glasslab" / module, "a") as source:
            source.write(f"\nimport {planted}  # planted\n")

    checked = lint_imports(tmp_path, PYTHONPATH=str(tmp_path / "src"))
    assert checked.returncode == 1, checked.stdout[-4000:]
    assert "1 kept, 2 broken" in checked.stdout
    assert "glasslab.data.shards -> glasslab.ladder.plan" in checked.stdout
    assert "glasslab.observatory.series -> glasslab.train.run" in checked.stdout


def run_probed(tmp_path: Path, code: str, probed: str = "torch") -> list[str]:
    """Run ``code`` in a fresh interpreter under the import probe; the imports of ``probed`` it recorded."""
    log = tmp_path / "probed-imports.log"
    done = subprocess.run([sys.executable, "-c", IMPORT_PROBE + code], cwd=tmp_path, capture_output=True, text=True,
                          env=subprocess_env(PROBE_LOG=str(log), PROBED=probed), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return log.read_text().splitlines() if log.exists() else []


def test_a_data_build_and_its_forked_workers_import_no_torch(tmp_path):
    sources = [{"domain": "code", "kind": "builtin", "path": "stdlib_code", "max_bytes": 40_000},
               {"domain": "prose", "kind": "builtin", "path": "stdlib_prose", "max_bytes": 40_000}]
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(
        {"sources": sources, "tokenizer": {"vocab_size": 300}, "num_workers": 2, "samples_per_domain": 0}))
    build = "from glasslab.cli import main\nsys.exit(main(['data', 'build', 'build.yaml', '--out', 'ds', '--quiet']))"

    assert run_probed(tmp_path, build) == []
    assert (tmp_path / "ds" / "manifest.json").is_file()


def test_the_probe_sees_an_import_in_a_forked_worker(tmp_path):
    """The probe watches a cheap package here (the data tokenizer's ``tokenizers``) instead of torch."""
    fork = ("pid = os.fork()\nif pid == 0:\n    import glasslab.data.tokenizer\n    os._exit(0)\n"
            "assert os.waitpid(pid, 0)[1] == 0 and 'tokenizers' not in sys.modules")
    recorded = run_probed(tmp_path, fork, probed="tokenizers")
    assert recorded and all("glasslab/data/tokenizer.py" in line for line in recorded), recorded


def long_functions(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_src_passes_60_lines():
    assert long_functions(SRC / "glasslab") == []
