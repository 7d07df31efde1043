"""The config file of defaults: click's precedence (command line > environment > file >
built-in), one-line errors naming the file and line, ``as2d config show``, and typer's shell
completion. Real processes of the installed ``as2d`` command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

AS2D = [sys.executable, "-m", "as2d"]


def run(args, tmp_path, config: str | None = None, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("AS2D_")}
    path = tmp_path / "config.toml"
    if config is not None:
        path.write_text(config)
    e.update(AS2D_CONFIG=str(path), HOME=str(tmp_path), **env)
    return subprocess.run([*AS2D, *args], capture_output=True, text=True, env=e, timeout=60)


def test_precedence_command_line_then_environment_then_file_then_built_in(tmp_path):
    built_in = run(["models", "path"], tmp_path).stdout.strip()
    assert built_in and "from-file" not in built_in
    config = 'models-dir = "/srv/from-file"\n'
    assert run(["models", "path"], tmp_path, config).stdout.strip() == "/srv/from-file"
    from_env = run(["models", "path"], tmp_path, config, AS2D_MODELS_DIR="/srv/from-env")
    assert from_env.stdout.strip() == "/srv/from-env"
    line = run(["models", "path", "--models-dir", "/srv/from-line"], tmp_path, config,
               AS2D_MODELS_DIR="/srv/from-env")
    assert line.stdout.strip() == "/srv/from-line"


def test_a_command_table_wins_over_the_top_level_and_show_says_where(tmp_path):
    config = ('model = "tiny.en"\nhotwords = ["Kubernetes", "as2d"]\n'
              '[transcribe]\nmodel = "small"\noutput_format = ["txt", "srt"]\n'
              '[serve]\napi-key = "sekrit"\nport = 9123\n')
    out = run(["config", "show", "transcribe"], tmp_path, config, AS2D_ENCODER="onnxruntime")
    assert out.returncode == 0, out.stderr
    rows = dict(line.split(" = ", 1) for line in out.stdout.splitlines()
                if not line.startswith("#"))
    assert rows["model"].startswith("'small'") and "line 4" in rows["model"]
    assert rows["hotwords"].startswith("'Kubernetes, as2d'") and "line 2" in rows["hotwords"]
    assert rows["output-format"].startswith("['txt', 'srt']")
    assert "environment ($AS2D_ENCODER)" in rows["encoder"]
    serve = run(["config", "show", "serve"], tmp_path, config).stdout
    assert "sekrit" not in serve and "api-key = '****'" in serve and "port = 9123" in serve
    assert "model = 'tiny.en'" in serve  # the top level reaches every command with --model


@pytest.mark.parametrize("config, says", [
    ('threads = "two"\n', "line 1: threads: a whole number expected, not 'two'"),
    ('model = "base"\nfoo = 1\n', "line 2: foo: no such option in any command"),
    ('[transcribe]\nport = 1\n', "line 2: [transcribe] port: no such option"),
    ('[nope]\nx = 1\n', "line 1: [nope]: as2d has no such command"),
    ('model = "base\n', "not valid TOML"),
    ('model = ["a", "b"]\n', "line 1: model: one value expected"),
    ('word_timestamps = 1\n', "line 1: word_timestamps: true or false expected, not 1"),
    ('threads = 2.9\n', "line 1: threads: a whole number expected, not 2.9"),
    ('beam_size = true\n', "line 1: beam_size: a whole number expected, not True"),
    ('model = true\n', "line 1: model: a string expected, not True"),
])
def test_a_bad_value_names_the_file_and_line(tmp_path, config, says):
    import typer.main

    from as2d.cli import config as cfg
    from as2d.cli.app import app

    path = tmp_path / "config.toml"
    path.write_text(config)
    with pytest.raises(cfg.ConfigError) as err:
        cfg.default_map(typer.main.get_command(app), path)
    assert str(err.value).startswith(str(path)) and says in str(err.value)


def test_a_bad_file_is_one_line_and_the_file_can_still_be_found(tmp_path):
    config = 'threads = "two"\n'
    out = run(["transcribe", "missing.wav"], tmp_path, config)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    line, = out.stderr.strip().splitlines()
    assert line == (f"as2d: error: {tmp_path / 'config.toml'} line 1: threads: a whole number "
                    "expected, not 'two'")
    where = run(["config", "path"], tmp_path, config)
    assert where.returncode == 0 and where.stdout.startswith(str(tmp_path / "config.toml"))


def test_no_file_is_no_setting(tmp_path):
    out = run(["config", "show"], tmp_path)
    assert out.returncode == 0 and "every option at its built-in default" in out.stdout
    assert "no such file yet" in run(["config", "path"], tmp_path).stdout


def test_shell_completion_is_typers_own(tmp_path):
    script = run(["--show-completion", "bash"], tmp_path)
    assert script.returncode == 0 and "complete" in script.stdout and "as2d" in script.stdout
    # what the installed script asks the program for, and gets: the commands
    e = {"_AS2D_COMPLETE": "complete_bash", "COMP_WORDS": "as2d tra", "COMP_CWORD": "1"}
    words = subprocess.run(["as2d"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **e}).stdout.split()
    assert "transcribe" in words
