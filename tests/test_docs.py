"""The README and the documentation: a front page with an example per command, one performance
table that is exactly its result file's figures, and no result file cited that does not exist.

The strict site build itself (a broken link, a missing page or API name) runs in
``scripts/test.sh`` before pytest; these checks are what a build cannot see.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import results_index  # noqa: E402  (the script, imported from its folder)

README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")}
# A result file named in the text: after bench/results/, or by its own name in backticks.
CITED = re.compile(r"bench/results/([\w.\-]+\.(?:json|txt|png))"
                   r"|`((?:bench|cold|encoder|int8|profile|tree)-[\w.\-]+\.(?:json|txt))`")


def _command_names() -> list[str]:
    import typer

    from as2d.cli.app import app

    return sorted(typer.main.get_command(app).commands)


def test_every_result_file_is_indexed_and_every_indexed_file_is_there():
    assert results_index.problems(results_index.load()) == []


def test_the_results_readme_is_written_from_the_index():
    assert (ROOT / "bench" / "results" / "README.md").read_text(encoding="utf-8") == \
        results_index.render(results_index.load())


def test_every_result_file_the_readme_or_a_page_cites_is_indexed():
    index = results_index.load()
    cited = {}
    for name, text in {"README.md": README, **PAGES}.items():
        for m in CITED.finditer(text):
            cited.setdefault(m.group(1) or m.group(2), name)
    assert len(cited) >= 20  # the pattern still finds what the pages cite
    missing = {f: where for f, where in cited.items()
               if f not in index and f not in ("index.json", "README.md")}
    assert not missing, missing


def test_the_readme_is_a_front_page_with_an_example_per_command():
    assert len(README.splitlines()) <= 300
    code = "\n".join(re.findall(r"```\w*\n(.*?)```", README, re.S))
    for command in _command_names():
        assert re.search(rf"\bas2d {command}\b", code), f"no example of as2d {command}"
    assert "import as2d" in code  # the Python API
    assert "bash scripts/test.sh" in code  # CI runs the README's test command


def test_every_command_has_a_guide_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for command in _command_names():
        page = {"mic": "mic.md"}.get(command, f"{command}.md")
        assert f" {page}" in nav and page in PAGES, command
        assert f"as2d {command}" in PAGES[page], command


def test_the_readme_performance_table_is_its_result_file():
    """The one table: every figure equals the file it names, rounded as printed."""
    section = README.split("## Performance", 1)[1].split("\n## ", 1)[0]
    name = re.search(r"bench/results/([\w.\-]+\.json)", section).group(1)
    summary = json.loads((ROOT / "bench" / "results" / name).read_text())["summary"]
    rows = [r for r in section.splitlines() if r.startswith("| ") and "---" not in r][1:]
    sides = ["as2d", "target", "fw", "wcpp"]
    assert len(rows) == len(sides) and set(sides) <= set(summary), "four sides, one run"
    for side, row in zip(sides, rows):
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
        s = summary[side]
        assert cells[1] == f"{s['rtfx']:.1f}×", (side, cells)
        assert cells[2] == f"{100 * s['wer']:.2f} %", (side, cells)
        assert cells[3] == f"{s['max_rss_mb']:,.0f} MB", (side, cells)
        assert s["same_text_every_round"] and not s["failed_runs"]


def test_the_plots_are_drawn_from_the_result_files(tmp_path):
    pytest.importorskip("matplotlib")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "plots.py"), "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    drawn = sorted(p.name for p in tmp_path.glob("*.png"))
    assert drawn == ["acceptance.png", "memory.png", "rtf.png", "speedup-window.png"]
    # The pages show every plot the script draws.
    shown = set(re.findall(r"\(img/([\w\-]+\.png)\)", PAGES["performance.md"]))
    assert shown == set(drawn)
