"""The package's shape: one ``as2d`` namespace, rooms whose arrows point one way, a cheap import.

These are promises the README's Layout section makes; ``scripts/import_graph.py`` prints the
graph they are checked on.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import import_graph  # noqa: E402  (the script, imported from its folder)


def test_import_graph_has_no_cycles_and_the_engine_knows_no_face():
    mods = import_graph.modules()
    graph, outside = {}, {}
    for name, path in mods.items():
        graph[name], outside[name] = import_graph.imports_of(name, path, set(mods))
    assert import_graph.problems(graph, outside) == []


def test_every_source_folder_installs_under_the_as2d_namespace():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    assert all(p == "as2d" or p.startswith("as2d.") for p in listed)
    folders = config["package-dir"]
    found = set()
    for prefix, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join([prefix, *rel]))
    # A sub-package missing from the list would silently be left out of a wheel.
    assert found <= listed | set(folders), sorted(found - listed)


def test_importing_as2d_loads_no_terminal_or_inference_library():
    code = ("import sys, as2d; "
            "print(sorted(m for m in ('typer', 'rich', 'onnxruntime', 'numpy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def test_the_public_api_names_resolve():
    import as2d

    for name in as2d.__all__:
        assert getattr(as2d, name) is not None
