"""MkDocs hook: lets mkdocstrings read the `as2d` package from this source tree, statically.

The package's folders install under other names (``as2d_cli`` → ``as2d``, ``runtime`` →
``as2d.runtime``, ``models`` → ``as2d.models``; see pyproject.toml), so the API reference
cannot find ``as2d`` by its folder name. This hook lays out ``build/api-src/as2d`` as a tree of
symbolic links with the installed names before the build, and mkdocs.yml points mkdocstrings
there. Nothing is imported: the docstrings and signatures are read from the source (importing
``as2d.__main__`` would run the command line).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lay_out(root: Path = ROOT) -> None:
    """``build/api-src/as2d``: the installed names, as links into the source folders."""
    tree = root / "build" / "api-src" / "as2d"
    if tree.exists() or tree.is_symlink():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    for entry in (root / "as2d_cli").iterdir():
        if entry.name in ("__pycache__", "__main__.py"):
            continue
        os.symlink(entry, tree / entry.name)
    os.symlink(root / "runtime", tree / "runtime")
    os.symlink(root / "models", tree / "models")


# Laid out when MkDocs loads this hook, before any plugin's `config` event: mkdocstrings fixes
# its search paths then, and a folder that appears later is not seen by every lookup.
lay_out()


# Docstrings cross-reference in Sphinx's roles (":class:`~as2d.api.Transcriber`"), which
# Markdown renders as the role's name before a code span; the page shows the name alone.
_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):<code>(~?)([\w.]+)</code>")


def on_page_content(html, **kwargs):
    return _ROLE.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html)
