"""What a diarization is asked to do, parsed in one place for every face (the command line,
the Python API, ``as2d batch`` and the server): speaker counts and named reference clips."""

from __future__ import annotations

from dataclasses import dataclass, field

from as2d.runtime.speakers.diarize import DiarizationError, check_counts


@dataclass(frozen=True)
class SpeakerOptions:
    """``num_speakers`` (exact) or ``min_speakers``/``max_speakers`` (bounds); ``references``:
    (name, audio) pairs, audio a path or 16-kHz samples, a short clean clip of each person."""

    num_speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None
    references: tuple[tuple[str, object], ...] = field(default=())

    def __post_init__(self) -> None:
        check_counts(self.num_speakers, self.min_speakers, self.max_speakers)
        names = [n for n, _ in self.references]
        for n in names:
            if not n.strip():
                raise DiarizationError("a speaker reference needs a name: NAME=FILE")
            problem = name_problem(n)
            if problem:
                raise DiarizationError(problem)
        if len(set(names)) != len(names):
            raise DiarizationError("two speaker references have the same name")


MAX_NAME = 100  # characters of a speaker's name


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a speaker, or None. A name goes into subtitles as it is (a VTT
    ``<v name>`` span, an SRT cue's ``[name]:``), so it is one line without ``<`` or ``>``."""
    if not isinstance(name, str):
        return f"a speaker's name must be text, not {type(name).__name__}"
    if len(name) > MAX_NAME:
        return f"a speaker's name is at most {MAX_NAME} characters ({name[:40]!r}...)"
    if any(c in "<>" or not c.isprintable() for c in name):
        return (f"the speaker name {name[:60]!r} must be one line of printable text without "
                "< or >")
    return None


def from_flags(diarize: bool, num_speakers: int | None = None,
               min_speakers: int | None = None, max_speakers: int | None = None,
               speakers: list[str] | tuple = ()) -> SpeakerOptions | None:
    """The speaker options of a request (None: no diarization); counts or names without
    ``diarize`` are an error rather than silently ignored."""
    given = (num_speakers, min_speakers, max_speakers)
    if not diarize:
        if any(v is not None for v in given) or speakers:
            raise DiarizationError("speaker counts and names need --diarize")
        return None
    refs = tuple(parse_reference(s) if isinstance(s, str) else tuple(s) for s in speakers or ())
    return SpeakerOptions(num_speakers, min_speakers, max_speakers, refs)


def parse_reference(text: str) -> tuple[str, str]:
    """``"Ann=ann.wav"`` -> ``("Ann", "ann.wav")`` (``--speaker``)."""
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise DiarizationError(f"--speaker wants NAME=FILE, not {text!r}")
    return name.strip(), path.strip()
