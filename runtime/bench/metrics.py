"""The paper's evaluation, as plain data: run configurations, pool, compare, find the oracle.

A *configuration* is a decoder (target-only, classic SD with a drafter and a fixed budget, or
AS²D) on a target model. Every configuration decodes the same audio in the same process; since
all of them are lossless, they decode the same windows, so per-window timings line up and can
be compared window by window. The terminal and the plots live in ``as2d_cli``.

Definitions (as in the paper):

- *window*: one unit of decoding (a 30-s Whisper window), recorded as the engine's own
  :class:`~as2d.runtime.events.WindowStats` (its ``source`` names the benchmark file);
- *pooled throughput*: total committed tokens / total decode time;
- *end-to-end real-time factor*: audio seconds / wall seconds (encoders and drafting included);
- *slower share*: the fraction of windows whose decode time exceeds target-only's;
- *hindsight per-window oracle*: for each window the fastest configuration of the catalog
  (target-only and every SD drafter × budget), chosen after the fact; its pooled throughput.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace

from as2d.runtime.events import WindowStats


@dataclass(frozen=True)
class Config:
    name: str  # e.g. "base-int8/as2d", "base-int8/sd:tiny.en-int8:k4"
    target: str
    decoder: str  # target | sd | as2d
    drafter: str | None = None
    budget: int | None = None  # None: adaptive

    @property
    def in_catalog(self) -> bool:
        """Part of the oracle's catalog: target-only and the fixed-budget SD choices."""
        return self.decoder == "target" or (self.decoder == "sd" and self.budget is not None)


@dataclass
class ConfigResult:
    config: Config
    windows: list[WindowStats] = field(default_factory=list)
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0
    texts: dict[str, str] = field(default_factory=dict)  # file → transcript
    wer: float | None = None

    @property
    def tokens(self) -> int:
        return sum(w.tokens for w in self.windows)

    @property
    def decode_seconds(self) -> float:
        return sum(w.decode_seconds for w in self.windows)

    @property
    def throughput(self) -> float:
        return self.tokens / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def rtf(self) -> float:
        return self.audio_seconds / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def acceptance(self) -> float:
        offered = sum(w.offered for w in self.windows)
        return sum(w.accepted for w in self.windows) / offered if offered else 0.0


def median_of_repeats(repeats: list[list[WindowStats]]) -> list[WindowStats]:
    """Per-window medians over repeated runs of one configuration (same windows each run)."""
    first = repeats[0]
    out = []
    for i, w in enumerate(first):
        same = [r[i] for r in repeats if i < len(r)]
        out.append(replace(w, decode_seconds=statistics.median(x.decode_seconds for x in same),
                           encode_seconds=statistics.median(x.encode_seconds for x in same)))
    return out


def key(w: WindowStats) -> tuple[str, int]:
    return (w.source, w.window)


def slower_share(result: ConfigResult, baseline: ConfigResult) -> float:
    """Fraction of windows decoded more slowly than by the baseline (target-only)."""
    base = {key(w): w.decode_seconds for w in baseline.windows}
    pairs = [(w.decode_seconds, base[key(w)]) for w in result.windows if key(w) in base]
    if not pairs:
        return 0.0
    return sum(1 for mine, theirs in pairs if mine > theirs) / len(pairs)


@dataclass
class Oracle:
    throughput: float
    choices: dict[tuple[str, int], str]  # window → fastest catalog configuration

    def wins(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name in self.choices.values():
            counts[name] = counts.get(name, 0) + 1
        return counts


def oracle(results: list[ConfigResult]) -> Oracle:
    """Hindsight per-window oracle over the catalog configurations among ``results``."""
    catalog = [r for r in results if r.config.in_catalog]
    if not catalog:
        raise ValueError("the oracle needs at least one catalog configuration")
    best: dict[tuple[str, int], tuple[float, str, int]] = {}
    for r in catalog:
        for w in r.windows:
            k = key(w)
            if k not in best or w.decode_seconds < best[k][0]:
                best[k] = (w.decode_seconds, r.config.name, w.tokens)
    tokens = sum(t for _, _, t in best.values())
    seconds = sum(s for s, _, _ in best.values())
    return Oracle(tokens / seconds if seconds else 0.0, {k: v[1] for k, v in best.items()})


def summary(results: list[ConfigResult], baseline_name: str | None = None) -> dict:
    """Everything the report prints, as JSON-ready data."""
    by_target: dict[str, list[ConfigResult]] = {}
    for r in results:
        by_target.setdefault(r.config.target, []).append(r)
    out = {"targets": {}}
    for target, rs in by_target.items():
        base = next((r for r in rs if r.config.decoder == "target"), None)
        orc = oracle(rs) if any(r.config.in_catalog for r in rs) else None
        rows = []
        for r in rs:
            rows.append({
                "config": r.config.name,
                "decoder": r.config.decoder,
                "drafter": r.config.drafter,
                "budget": r.config.budget if r.config.budget is not None else "auto",
                "tokens": r.tokens,
                "decode_seconds": round(r.decode_seconds, 4),
                "throughput": round(r.throughput, 2),
                "speedup": round(r.throughput / base.throughput, 3) if base and base.throughput
                else None,
                "rtf": round(r.rtf, 3),
                "rtf_ratio": round(r.rtf / base.rtf, 3) if base and base.rtf else None,
                "acceptance": round(r.acceptance, 4),
                # beam search: beam steps per pass (1 target-only, more when speculative)
                "beam_steps_per_pass": round(sum(w.steps for w in r.windows)
                                             / max(1, sum(w.passes for w in r.windows)), 3)
                if any(w.steps for w in r.windows) else None,
                "slower_share": round(slower_share(r, base), 4) if base else None,
                "of_oracle": round(r.throughput / orc.throughput, 4) if orc and orc.throughput
                else None,
                "wer": None if r.wer is None else round(r.wer, 4),
            })
        out["targets"][target] = {
            "configs": rows,
            "oracle_throughput": round(orc.throughput, 2) if orc else None,
            "oracle_wins": orc.wins() if orc else {},
            "windows": len(base.windows) if base else None,
        }
    return out


def results_to_dict(results: list[ConfigResult]) -> list[dict]:
    return [{"config": asdict(r.config), "audio_seconds": r.audio_seconds,
             "wall_seconds": r.wall_seconds, "wer": r.wer,
             "windows": [asdict(w) for w in r.windows]} for r in results]
