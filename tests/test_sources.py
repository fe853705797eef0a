"""Every number has its source: the pages and the card's Markdown name the command that recomputes each
headline number (or the file and key it is read from), and the shown commands, run as shown beside the
lab, print the page's numbers."""

from __future__ import annotations

import re
import shlex
import shutil

import pytest

from cli_runner import run_cli
from glasslab.observatory.publish import page_file, publish
from observatory_lab import build_lab, chromium_path

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")

NUMBER = r"[-+]?\d+(?:\.\d+)?"


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)
    assert not errors, errors
    return page


def shown_sources(page) -> list[dict]:
    """Every number on the page that names its source: its text, the source's text and kind."""
    return page.evaluate("""() => [...document.querySelectorAll('[data-source]')].map(n => ({
        text: n.innerText, source: n.dataset.source, kind: n.dataset.sourceKind, cls: n.className}))""")


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(NUMBER, text)]


def close_at_shown_digits(shown: str, recomputed: float) -> bool:
    """``recomputed`` rounds to the number as the page wrote it (its decimals)."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown) - recomputed) <= 0.5 * 10 ** -decimals + 1e-12


def run_shown(command: str, cwd) -> str:
    """A shown command, run as shown in the folder that holds the lab (``glasslab`` is this checkout's)."""
    words = shlex.split(command)
    assert words[0] == "glasslab" and not any(w.startswith("/") for w in words), command
    result = run_cli(*words[1:], cwd=cwd, timeout=600)
    assert result.returncode == 0, command + "\n" + result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


def test_the_ladder_pages_commands_print_its_numbers(demo_lab, browser, tmp_path):
    fit = next(p for p in demo_lab.root.glob("demo-fit-*") if (p / "fit.json").is_file())
    page = open_page(browser, (demo_lab.root / "site" / page_file("ladder", fit.name)).as_uri())
    shown = shown_sources(page)
    predicted = page.locator("#prediction .predicted").inner_text()  # "4.569 [4.192, 4.975]"
    backtest_mean = page.locator("#backtest-mean").inner_text().rstrip("%")
    fit_command = page.locator("#prediction .predicted").get_attribute("data-source")
    actual = {n.get_attribute("data-task"): (n.inner_text(), n.get_attribute("data-source"))
              for n in page.locator(".task-actual").all()}
    page.close()
    assert fit_command.startswith("glasslab ladder fit ")
    assert {s["source"] for s in shown if "backtest-error" in s["cls"]} == {fit_command}
    assert set(actual) >= {"next_word_code", "next_word_prose"}
    eval_commands = {source for _, source in actual.values() if source.startswith("glasslab eval ")}
    assert len(eval_commands) == 1  # every task scored at the hero's last step: one command
    # The demo lab stays as it is: the commands write their step folders into a copy of it, named as it is.
    shutil.copytree(demo_lab.root, tmp_path / demo_lab.root.name, ignore=shutil.ignore_patterns("site"))

    printed = run_shown(fit_command, tmp_path)
    line = next(x for x in printed.splitlines() if "prediction at" in x)
    point, lo, hi = numbers(line.split("│")[2])[:3]  # "4.5687, interval [4.1924, 4.9747] (90%)"
    shown_point, shown_lo, shown_hi = re.findall(NUMBER, predicted)
    assert all(close_at_shown_digits(s, v) for s, v in ((shown_point, point), (shown_lo, lo), (shown_hi, hi))), \
        (predicted, line)
    mean_line = next(x for x in printed.splitlines() if "back-test mean" in x)
    assert close_at_shown_digits(backtest_mean, numbers(mean_line.split("│")[2])[0]), (backtest_mean, mean_line)

    printed = run_shown(eval_commands.pop(), tmp_path)
    scored = {row.split()[0]: float(row.split()[3]) for row in printed.splitlines()[1:] if row.startswith("next_word")}
    scored["macro"] = float(re.search(r"^macro acc (\S+)", printed, re.M).group(1))
    for task, (text, source) in actual.items():
        if source.startswith("glasslab eval "):
            assert close_at_shown_digits(text, scored[task]), (task, text, scored)


def test_card_markdown_names_each_numbers_source_in_footnotes(demo_lab):
    markdown = run_cli("card", "demo", "--markdown", "--lab", str(demo_lab.root)).stdout
    table = markdown.split("## Expectations")[1].split("## Runs")[0]
    notes = dict(re.findall(r"^\[\^(\d+)\]: (.+)$", markdown, re.M))
    marks = re.findall(r"\[\^(\d+)\]", table)
    assert marks and set(marks) <= set(notes)
    assert any(text.startswith("`glasslab ladder fit ") for text in notes.values())  # the hero's prediction
    assert any("result.json, key eval/macro/loss`" in text for text in notes.values())  # its actual value
    total = re.search(r"^Total: .*\[\^(\d+)\]$", markdown, re.M)
    assert total and "summed over" in notes[total.group(1)]
    assert str(demo_lab.root.parent) not in markdown


def test_a_published_page_shows_its_sources_without_local_paths(browser, tmp_path):
    lab = build_lab(tmp_path / "where-this-lab-lived-on-disk" / "lab")
    site = publish(lab, tmp_path / "site").parent
    for kind, item in (("ladder", "ladder-cccc3333"), ("run", "hero-dddd4444"), ("data", "data-abc12345")):
        page = open_page(browser, (site / page_file(kind, item)).as_uri())
        shown = shown_sources(page)
        listed = page.locator("#sources li").all_inner_texts()
        page.close()
        assert shown and listed, kind
        assert all(s["source"].startswith(("glasslab ", "lab/")) for s in shown), (kind, shown)
        assert not any("where-this-lab-lived" in s["source"] for s in shown)
        assert {s["source"] for s in shown} <= {t.removeprefix("read from ") for t in listed}
    assert "where-this-lab-lived" not in "".join(p.read_text() for p in site.rglob("*.js"))
