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


# The parts an engine is assembled from. Outside the engine's front door (as2d/engine.py) no
# face may put them together itself: every command, the API, batch and the server build one
# through as2d.engine.Engine, so they cannot drift apart by omission.
ASSEMBLY = {"AS2D", "SerialSD", "TargetOnly", "LongFormTranscriber", "LiveSession", "Answerer",
            "WordAligner", "SileroVAD", "EnergyVAD", "make_vad", "load_whisper", "load_llm",
            "rows_exact"}
FRONT_DOOR = {"as2d_cli/engine.py", "as2d_cli/loading.py"}


def _calls(path: Path) -> set[str]:
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
    return names


def test_the_engine_is_assembled_in_one_place():
    offenders = {}
    for path in sorted((ROOT / "as2d_cli").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in FRONT_DOOR:
            continue
        found = _calls(path) & ASSEMBLY
        if found:
            offenders[rel] = sorted(found)
    assert offenders == {}
    # ... and the front door does assemble them (the check above is not vacuous).
    assert {"AS2D", "SerialSD", "TargetOnly", "LongFormTranscriber", "LiveSession",
            "Answerer", "rows_exact", "make_vad"} <= _calls(ROOT / "as2d_cli/engine.py")


def test_no_two_modules_or_public_classes_share_a_name():
    import ast

    modules: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    for folder in ("as2d_cli", "runtime", "models"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.name != "__init__.py":
                modules.setdefault(path.stem, []).append(rel)
            for node in ast.parse(path.read_text(), rel).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    classes.setdefault(node.name, []).append(rel)
    assert {k: v for k, v in modules.items() if len(v) > 1} == {}
    assert {k: v for k, v in classes.items() if len(v) > 1} == {}
