"""``as2d batch``: an archive transcribed on a real local Ray cluster (2 CPUs, actors of one
thread each), with real models and real clips.

What it must guarantee: the same files as ``as2d transcribe``; every file done exactly once
even when a worker is killed mid-file; an actor the cluster cannot place holds no file; an
interrupted run resumed without redoing or losing anything; a bad file among good ones is one
error row, not a crash. Each run starts its actors (a process and the models each), so one
command-line run is checked for all but the interrupt, which is a run of its own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from as2d.cli.app import app
from as2d.distributed import WorkerSpec, discover, run_batch
from as2d.engine import EngineSpec
from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
from as2d.writers import SubtitleOptions
from tests.helpers import LazyModule, cli, deadline

ray = LazyModule("ray")

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
# The shortest clips (3.0, 3.3 and 5.3 s): the file stays quick on two cores. Three: one more
# than two actors take at once (a Ctrl-C after the first file leaves one never started).
CLIPS = [f"sense_and_sensibility_01_austen_64kb-{n}.wav" for n in ("0880", "0930", "0890")]


@pytest.fixture(scope="module")
def cluster():
    if not all((LIBRIVOX / c).is_file() for c in CLIPS):
        pytest.skip("pocketsphinx-testdata is not installed")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture
def archive(tmp_path, bundle):
    bundle("base")
    bundle("tiny.en")
    folder = tmp_path / "archive" / "day1"
    folder.mkdir(parents=True)
    for name in CLIPS:
        shutil.copy(LIBRIVOX / name, folder / name)
    return tmp_path / "archive"


def _spec(out: Path, models_root: Path, formats=("txt", "json")) -> WorkerSpec:
    engine = EngineSpec(model="base", drafter="tiny.en", decoder="as2d", threads=1,
                        models_dir=str(models_root), shares_cores=True)
    return WorkerSpec(engine=engine, options=TranscribeOptions(),
                      output_dir=str(out), formats=list(formats), subtitle=SubtitleOptions())


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def _done_once(out: Path, jobs) -> None:
    """Every job has exactly one ``done`` row, its outputs exist, no temp file is left."""
    done = [r["path"] for r in _rows(out) if r["status"] == "done"]
    assert sorted(done) == sorted(j.path for j in jobs)
    for row in _rows(out):
        for p in row.get("outputs", []):
            assert Path(p).is_file()
    assert not list(out.glob("*.part"))


def test_one_run_matches_transcribe_through_a_bad_file_a_killed_actor_and_one_unplaced(
        cluster, archive, models_root, tmp_path, monkeypatch):
    """One ``as2d batch`` run (a folder as input, recursive; three actors of one CPU asked of
    the two-CPU cluster), checked every way the batch must hold: each run costs seconds of
    actor start-ups (a process and the models each), and these faults do not hide each other.

    - The same files as ``as2d transcribe``, byte for byte (the killed actor's file too).
    - A broken file among them is one error row: the others done, no output for it, one
      error line, exit 1.
    - An actor killed mid-file (the first to start one) is given up, its file goes back to
      the queue and is done once, by another actor, with one warning line.
    - An actor Ray cannot place holds no file: the third waits for a CPU while two hold both
      (as after a lost node, when the replacement finds no room), and the kill frees one CPU
      for two waiting actors (the third and the killed one's replacement). So four actors are
      made and at most three are ever up; a file goes only to one that is up, and the run ends
      without the others (it used to wait for one for ever: the alarm fails the test).
    - Files go longest first; the same command again has nothing to do."""
    from as2d import distributed

    files = sorted(str(p) for p in archive.rglob("*.wav"))
    bad = archive / "day1" / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" + os.urandom(2000))
    plain = cli("transcribe", *files, "-o", tmp_path / "plain", "-f", "all", "-t", "1", "-q",
                models_dir=models_root)
    assert plain.exit_code == 0, plain.output
    handles: dict = {}
    killed: list[str] = []
    real_run_batch = distributed.run_batch

    def killing_run_batch(jobs, spec, *, on_event, **kw):
        """The command's own run, with the live actors by name: the first actor to start a
        file is killed 0.2 s into it (mid-file: the clip takes about a second to decode)."""
        def event(e):
            if e.kind == "start" and not killed:
                killed.append(e.worker)
                threading.Timer(0.2, ray.kill, (handles[e.worker],),
                                {"no_restart": True}).start()
            on_event(e)

        return real_run_batch(jobs, spec, on_event=event, handles=handles, **kw)

    monkeypatch.setattr(distributed, "run_batch", killing_run_batch)
    with deadline(180, "as2d batch waited for an actor Ray cannot place: no end"):
        batch = cli("batch", archive / "day1", "-o", tmp_path / "ray", "-f", "all", "-j", "3",
                    "-t", "1", "--retries", "2", models_dir=models_root)
    out = batch.output
    assert batch.exit_code == 1, out
    assert "as2d: error: " in out and "Traceback" not in out
    expected = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert len(expected) == 5 * len(CLIPS)
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == sorted(
        expected + ["manifest.jsonl"])  # nothing for the broken file, no .part left
    for name in expected:
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
    rows = _rows(tmp_path / "ray")
    failed = [r for r in rows if r["status"] != "done"]
    assert len(failed) == 1 and failed[0]["path"] == str(bad) and failed[0]["error"]
    done = [r for r in rows if r["status"] == "done"]
    assert len(done) == len(CLIPS) == len(rows) - 1  # each file once
    # The killed actor: its file redone once, elsewhere, and said.
    assert len(killed) == 1 and out.count(" died on ") == 1, out
    assert f"worker {killed[0]} died on" in out
    retried = [r for r in rows if r.get("lost_workers")]
    assert len(retried) == 1 and retried[0]["lost_workers"] == killed
    assert retried[0]["attempts"] == 2 and not retried[0]["worker"].startswith(killed[0] + "@")
    # w1-w3 asked, w4 the replacement: at most three ever up, and only those took files.
    up = set(re.findall(r"worker (w\d+) ready", out))
    assert killed[0] in up and up < {"w1", "w2", "w3", "w4"}, out
    assert {r["worker"].split("@")[0] for r in rows} <= up - set(killed)
    # Dispatched longest first (5.3, 3.3, 3.0 s).
    bad.unlink()
    assert [Path(j.path).name for j in discover([archive])] == CLIPS[::-1]
    # The same command again: nothing to do.
    again = cli("batch", archive / "day1", "-o", tmp_path / "ray", "-f", "all", "-j", "2",
                models_dir=models_root)
    assert again.exit_code == 0 and len(_rows(tmp_path / "ray")) == len(rows)
    assert f"{len(CLIPS)} already done" in again.output


@pytest.mark.serial
def test_interrupt_then_resume_redoes_nothing_and_loses_nothing(cluster, archive, models_root,
                                                               tmp_path):
    out = tmp_path / "out"
    jobs = discover([archive])

    def ctrl_c_after_first(e):
        if e.kind == "end":
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered to this process

    first = run_batch(jobs, _spec(out, models_root), actors=2, on_event=ctrl_c_after_first)
    assert first.interrupted
    # The file in flight when Ctrl-C came was finished and recorded; no new one was started.
    assert 1 <= first.done < len(CLIPS) and first.failed == 0
    kept = {r["path"]: [Path(p).stat().st_mtime_ns for p in r["outputs"]] for r in _rows(out)}
    assert not list(out.glob("*.part"))
    # Nothing is written for a file without a row.
    stems = {Path(p).stem for r in _rows(out) for p in r["outputs"]}
    assert {p.stem for p in out.iterdir() if p.suffix in (".txt", ".json")} == stems

    second = run_batch(discover([archive]), _spec(out, models_root), actors=2)
    assert not second.interrupted
    assert second.skipped == first.done and second.done == len(CLIPS) - first.done
    _done_once(out, jobs)
    for row in _rows(out):
        if row["path"] in kept:  # not redone: the outputs were not written again
            assert [Path(p).stat().st_mtime_ns for p in row["outputs"]] == kept[row["path"]]


def test_usage_errors_are_one_line(tmp_path):
    runner = CliRunner()
    no_out = runner.invoke(app, ["batch", str(LIBRIVOX)])
    assert no_out.exit_code == 2 and "give the output folder with -o DIR" in no_out.output
    missing = runner.invoke(app, ["batch", str(tmp_path / "nope"), "-o", str(tmp_path / "o")])
    assert missing.exit_code == 1 and "no such file or folder" in missing.output
