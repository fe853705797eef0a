"""``glasslab export`` end to end: trained dense and MoE runs → a lab step folder and ``--out`` copy that
``transformers`` loads offline with logits within 1e-4 of ours, a model card, a manifest, and links back."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import transformers

from glasslab.cli import main as cli_main
from glasslab.config import from_dict
from glasslab.data.loader import eval_batches
from glasslab.layout import EXPORT_MANIFEST, MODEL_CARD, STEP_RECORD
from glasslab.model import Transformer
from glasslab.model.card import USAGE
from glasslab.track import RunReader
from glasslab.train import checkpoint as ckpt
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    """A lab with a dataset and two finished 12-step runs: ``dense-run`` and ``moe-run``."""
    root = tmp_path_factory.mktemp("export") / "lab"
    dataset = build_tiny_dataset(root)
    for name, moe in (("dense-run", False), ("moe-run", True)):
        cfg = from_dict(RunConfig, tiny_run_config(dataset, moe=moe, max_steps=12, checkpoint_interval=6,
                                                   optimizer={"lr": 1e-2}))
        assert train(cfg, root / name)["status"] == "finished"
    return root


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """``glasslab ARGS`` in this process, as the command line runs it."""
    code = cli_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _ours(run_dir: Path, step: int) -> Transformer:
    path = ckpt.checkpoint_path(run_dir, step)
    model = Transformer(from_dict(RunConfig, ckpt.checkpoint_config(path)).model)
    model.load_state_dict(ckpt.load_checkpoint(path)["model"])
    return model.eval()


@pytest.mark.slow
@pytest.mark.parametrize(("run", "architecture"),
                         [("moe-run", "Glm4MoeForCausalLM"), ("dense-run", "Qwen3ForCausalLM")])
def test_export_through_the_cli_loads_in_transformers_with_matching_logits(lab, tmp_path, capsys, monkeypatch,
                                                                           run, architecture):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "hf"
    code, stdout, stderr = _cli(capsys, "export", f"{run}@12", "--lab", str(lab), "--out", str(out))
    assert code == 0, stderr[-3000:]
    assert f"exported as {architecture}" in stdout

    (folder,) = [p for p in lab.glob("export-*") if json.loads((p / STEP_RECORD).read_text())["config"]["run"] == run]
    step_json = json.loads((folder / STEP_RECORD).read_text())
    assert step_json["status"] == "succeeded" and step_json["config"]["step"] == 12  # the page links by these
    manifest = json.loads((out / EXPORT_MANIFEST).read_text())
    assert manifest == json.loads((folder / EXPORT_MANIFEST).read_text())
    assert (manifest["run"], manifest["step"], manifest["architecture"]) == (run, 12, architecture)
    assert manifest["glasslab_version"] and manifest["max_logit_diff"] <= 1e-4

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True)
    tokens = next(eval_batches(lab / "data", "prose", 32, 4))[:, :32]
    with torch.no_grad():
        ours, theirs = _ours(lab / run, 12)(tokens), hf.eval()(tokens).logits
    assert ours.std() > 0.1  # a trained model's logits, not a flat output any mapping would match
    assert (ours - theirs).abs().max().item() <= 1e-4
    tokenizer = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert tokenizer.decode(tokenizer("def main():")["input_ids"]) == "def main():"

    card = (out / MODEL_CARD).read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")
    for fact in (manifest["size_name"], architecture, "PSF-2.0", "eval/macro/loss", f"/run/{run}", "FLOPs"):
        assert fact in card
    with RunReader(lab / run) as reader:
        exports = [e for e in reader.events() if e["kind"] == "export"]
    assert exports and folder.name in exports[-1]["body"] and exports[-1]["step"] == 12

    code, stdout, stderr = _cli(capsys, "export", run, "--lab", str(lab), "--out", str(out))  # latest = 12: cached
    assert code == 0 and folder.name in stdout, stderr[-2000:]
    assert json.loads((folder / STEP_RECORD).read_text())["attempts"] == 1  # reused, not redone


@pytest.mark.slow
def test_the_readme_lines_load_and_sample_from_an_export(lab, tmp_path, capsys, monkeypatch):
    out = tmp_path / "x"
    assert _cli(capsys, "export", "moe-run", "--lab", str(lab), "--out", str(out))[0] == 0
    lines = USAGE.format(path="/tmp/x")
    assert lines in README.read_text()  # the README shows exactly these lines
    printed = []
    monkeypatch.setattr("builtins.print", lambda *args: printed.append(" ".join(map(str, args))))
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(lines.replace("/tmp/x", str(out)), {})
    assert printed and printed[0].startswith("def ") and len(printed[0]) > len("def ") + 10


def test_out_refuses_a_folder_of_unrelated_files_before_any_work(lab, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("do not touch")
    before = sorted(p.name for p in lab.iterdir())
    code, _, stderr = _cli(capsys, "export", "dense-run", "--lab", str(lab), "--out", str(out))
    assert code == 2 and stderr.count("\n") == 1
    assert stderr.startswith("glasslab export: error: ") and "not an earlier export" in stderr
    assert sorted(p.name for p in lab.iterdir()) == before  # no export step was even started
    assert [p.name for p in out.iterdir()] == ["thesis.tex"] and (out / "thesis.tex").read_text() == "do not touch"


@pytest.mark.parametrize(("ref", "expected"), [("no-such-run", "no run store"), ("dense-run@5", "available: 6, 12"),
                                               ("dense-run@x", "expected RUN or RUN@STEP")])
def test_bad_references_are_one_line(lab, capsys, ref, expected):
    code, _, stderr = _cli(capsys, "export", ref, "--lab", str(lab))
    assert code == 2 and expected in stderr and stderr.count("\n") == 1


@pytest.mark.slow
def test_the_demo_exports_its_hero_and_a_user_exports_it_again(demo_lab, tmp_path, capsys, monkeypatch):
    """From a finished `glasslab demo --quick`: its own export step names the hero (what the page links by),
    and `glasslab export <hero> --out DIR` then the README's lines print a sample."""
    lab = demo_lab.root
    (hero,) = lab.glob("demo-hero-*")
    (export,) = [p for p in lab.glob("export-*")  # the other one exports the demo's SFT run
                 if json.loads((p / STEP_RECORD).read_text())["config"]["run"] == hero.name]
    config = json.loads((export / STEP_RECORD).read_text())["config"]
    final_step = json.loads((hero / "result.json").read_text())["step"]
    assert (config["run"], config["step"]) == (hero.name, final_step)
    manifest = json.loads((export / EXPORT_MANIFEST).read_text())
    assert manifest["run"] == hero.name and manifest["max_logit_diff"] <= 1e-4
    assert f"/run/{hero.name}" in (export / MODEL_CARD).read_text()

    out = tmp_path / "x"
    code, stdout, stderr = _cli(capsys, "export", hero.name, "--lab", str(lab), "--out", str(out))
    assert code == 0, stderr[-2000:]
    assert export.name in stdout  # the same checkpoint: the demo's export step, cached
    printed = []
    monkeypatch.setattr("builtins.print", lambda *args: printed.append(" ".join(map(str, args))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(USAGE.format(path=str(out)), {})
    assert printed and printed[0].startswith("def ")
