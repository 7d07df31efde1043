"""What word timing costs inside a transcription: cProfile of ``WordAligner.align`` in the
aligning thread's CPU time (not wall: a shared machine's waits are not the aligner's), beside
the whole transcription's process CPU time.

    python scripts/bench_speaker_align_profile.py /tmp/speakers-set/conv05.wav \
        > bench/results/diarization-align-profile-cpu.txt
"""
import cProfile
import io
import pstats
import sys
import time

import as2d
from as2d.api import _audio
from as2d.runtime.transcribe.longform import TranscriptionInfo
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
from as2d.runtime.whisper.alignment import WordAligner

path = sys.argv[1]
tr = as2d.Transcriber("base", threads=2)
prof = cProfile.Profile(time.thread_time)
inner = WordAligner.align
tot = [0.0, 0, 0.0]


def wrapped(self, *a, **k):
    t, c = time.perf_counter(), time.thread_time()
    prof.enable()
    try:
        return inner(self, *a, **k)
    finally:
        prof.disable()
        tot[0] += time.perf_counter() - t
        tot[1] += 1
        tot[2] += time.thread_time() - c


WordAligner.align = wrapped
opts = TranscribeOptions.parse(word_timestamps=True)
clip = _audio(path, 16000)
info = TranscriptionInfo(None, 0.0, clip.duration, source=clip.source)
t, c = time.perf_counter(), time.process_time()
n = len(list(tr.engine.transcribe(clip, opts, info)))
print(f"file {path}: {clip.duration:.1f} s, {n} segments; transcription wall "
      f"{time.perf_counter() - t:.2f} s, "
      f"process CPU {time.process_time() - c:.2f} s; align calls {tot[1]}, align wall "
      f"{tot[0]:.2f} s, align thread CPU {tot[2]:.2f} s; "
      f"load {open('/proc/loadavg').read().split()[:3]}")
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
print(s.getvalue())
