#!/usr/bin/env bash
# The GPU check in one call: the GPU test suite (`pytest -m gpu`) and every row of benchmarks/gpu_report.py, in at
# most 8 minutes on an H100 (the machine's start not included), everything written to one folder.
#
#   bash benchmarks/gpu_check.sh "$OUT"            # on a GPU machine; OUTDIR defaults to ${OUT:-gpu_check_out}
#   bash benchmarks/gpu_check.sh --tiny /tmp/check  # gpu_report's tiny shape: checks this script on CPU (~75 s)
#
# OUTDIR gets:
#   device.txt                       nvidia-smi -L, python, torch and its CUDA, transformers, trl and trl_ext versions
#   pytest.log, pytest.xml           `pytest -m gpu tests/gpu -q`: the text log (every test's outcome and duration)
#   pytest_engines.{log,xml}         and the JUnit XML (also written when the time cap interrupts pytest);
#                                    test_engines.py's launches run beside the rest, logged apart (and in pytest.log)
#   gpu_report.md, gpu_report.json   the report's Markdown table and its figures as JSON (gpu_figures.row_figures)
#   gpu_report.log                   the report's progress: every run's step times
#   timings.txt                      each stage's elapsed seconds and exit status
# A failing or timed-out stage does not stop the next one; the script exits 1 if any stage failed (124 in
# timings.txt: it ran into its time cap). Without CUDA it stops after device.txt, unless --tiny.
#
# Offline: nothing is downloaded (HF_HUB_OFFLINE=1). gpu_report.py builds random models; the tests' toy models and
# the toy agent are built in-process (trl_ext.toy, trl_ext.toy_agent; cached under $TRL_EXT_CACHE, else
# ~/.cache/trl_ext). Run it from the repository root; PYTHON names the interpreter (default: python).
#
# Budget: 480 s in all. Each stage runs under `timeout -s INT` (pytest still writes its XML, the report keeps the
# rounds it finished; SIGKILL 10 s later), and the report gets the time the stages before it left. The figures
# below are estimates for an H100: none of the suite's or the new rows' times was ever measured; the next run's
# timings.txt, pytest.log (--durations) and gpu_report.log are what to size this by.
#   device   ~5 s, capped at 30 s.
#   pytest   59 tests: ~50 in-process runs of the tiny toy model on CUDA at ~1.5 s (~75 s); the toy model, teacher
#            and agent built on CPU by the fixtures and the multi-turn test (~35 s); 8 accelerate launches
#            (FSDP2 / ZeRO-3, tests/gpu/test_engines.py) at ~10-15 s (~100 s); collection ~5 s: ~215 s in one
#            process, ~115 s as two (test_engines.py beside the rest), capped at 180 s.
#   report   every row, --rounds 2 --steps 1 --warmup 1: 20 trainers x 3 runs (one untimed warm-up run and two
#            measured rounds) x 2 optimizer steps. docs/gpu_report.md's H100 run (7 rows, 14 trainers x 5 runs x 5
#            steps in ~9 minutes) gives ~1.0 s per GRPO-family step, 1.2 s for DPO, 1.4 s for on-policy
#            distillation, and ~1.8 s per run to build and tear down a trainer. Per pass over the trainers, steps:
#            10 x 1.0 (sapo, cispo, gspo, grpo, mix_chord: both sides) + 4 x 1.8 (distillation: k=0, 64, -1 and
#            TRL; guessed) + 2 x 1.2 (dpo) + 2.0 + 1.0 (ppo: critic PPO, guessed, and trl_ext GRPO) + 2 x 0.5
#            (multi_turn: the toy agent; guessed) = 23.6 s; 3 passes x 2 steps x 23.6 s = ~142 s, plus 60 runs x
#            1.8 s = ~108 s to build them, plus ~20 s of imports and the two 0.5B models: ~270 s.
#            It gets 480 s minus the time spent (>= 250 s after a capped pytest), minus 10 s for the kill; its
#            --time-limit is 25 s less (imports, writing): a row group whose round would end later is left out of
#            that round. The rows never run on a GPU (distillation, ppo, multi_turn) go first, so a cut falls on
#            the second round of the rows measured before.
#   In all: ~5 + ~115 + ~270 = ~390 s expected, 480 s at most.
set -euo pipefail

TOTAL_S=480
DEVICE_CAP_S=30
PYTEST_CAP_S=180
KILL_AFTER_S=10
REPORT_MARGIN_S=25
# gpu_report's rows, the ones never run on a GPU first (see the budget above)
ROWS=distillation,ppo,multi_turn,sapo,cispo,gspo,grpo,mix_chord,dpo

usage="usage: bash benchmarks/gpu_check.sh [--tiny] [OUTDIR]   (OUTDIR: default \${OUT:-gpu_check_out})"
shape=0.5b
outdir=""
for arg in "$@"; do
    case "$arg" in
        --tiny) shape=tiny ;;
        -h | --help)
            echo "$usage"
            exit 0
            ;;
        -*)
            echo "gpu_check.sh: unknown option $arg; allowed: --tiny, --help" >&2
            echo "$usage" >&2
            exit 2
            ;;
        *)
            if [[ -n "$outdir" ]]; then
                echo "gpu_check.sh: one OUTDIR only, got $outdir and $arg" >&2
                exit 2
            fi
            outdir=$arg
            ;;
    esac
done
outdir=${outdir:-${OUT:-gpu_check_out}}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
if [[ $shape == tiny ]]; then
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} # CPU runs of tiny models: one thread is as fast, and steadier
fi
: >"$outdir/timings.txt"
failed=0

# stage NAME CAP_S LOG COMMAND...: run COMMAND under a time cap, its output shown and appended to LOG; record the
# elapsed seconds and the exit status in timings.txt.
stage() {
    local name=$1 cap=$2 log=$3
    shift 3
    local start=$SECONDS rc=0
    echo "== $name (at most $cap s)"
    timeout -s INT -k "$KILL_AFTER_S" "$cap" "$@" 2>&1 | tee -a "$log" || rc=$?
    local elapsed=$((SECONDS - start))
    echo "== $name: $elapsed s, exit $rc"
    printf '%-8s %4d s  exit %d\n' "$name" "$elapsed" "$rc" >>"$outdir/timings.txt"
    if ((rc != 0)); then
        failed=1
    fi
}

versions='
import platform, sys
import torch, transformers, trl, trl_ext
print(f"python {platform.python_version()} ({sys.executable})")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, CUDA available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    print(f"device 0: {props.name}, {props.total_memory / 2**30:.0f} GiB, {torch.cuda.device_count()} device(s)")
print(f"transformers {transformers.__version__}, trl {trl.__version__}, trl_ext {trl_ext.__version__}")
if sys.argv[1] == "require-cuda" and not torch.cuda.is_available():
    sys.exit("gpu_check.sh: no CUDA device (torch.cuda.is_available() is False); --tiny checks the script on CPU")
'
{
    echo "gpu_check.sh --shape $shape, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout 10 nvidia-smi -L || echo "nvidia-smi -L failed"
    else
        echo "nvidia-smi: not on PATH"
    fi
} | tee "$outdir/device.txt"
require=$([[ $shape == tiny ]] && echo any-device || echo require-cuda)
stage device "$DEVICE_CAP_S" "$outdir/device.txt" "$PYTHON" -c "$versions" "$require"
if ((failed)); then
    exit 1
fi

# The GPU suite as two pytest processes side by side: the in-process tests, and test_engines.py's accelerate
# launches (mostly process start-up on the host's cores). The report, which is timed, runs after both.
gpu_suite='
python=$1 out=$2 rc=0
"$python" -m pytest -m gpu tests/gpu/test_engines.py -q -rA --durations=0 --junitxml="$out/pytest_engines.xml" \
    >"$out/pytest_engines.log" 2>&1 &
engines=$!
"$python" -m pytest -m gpu tests/gpu --ignore=tests/gpu/test_engines.py -q -rA --durations=0 \
    --junitxml="$out/pytest.xml" || rc=$?
wait "$engines" || rc=$((rc ? rc : $?))
echo "== tests/gpu/test_engines.py ($out/pytest_engines.log)"
cat "$out/pytest_engines.log"
exit "$rc"
'
echo "pytest -m gpu tests/gpu: test_engines.py beside the rest" >"$outdir/pytest.log"
stage pytest "$PYTEST_CAP_S" "$outdir/pytest.log" bash -c "$gpu_suite" gpu_suite "$PYTHON" "$outdir"

report_cap=$((TOTAL_S - SECONDS - KILL_AFTER_S))
report=(benchmarks/gpu_report.py --shape "$shape" --rows "$ROWS" --rounds 2 --steps 1 --warmup 1
    --time-limit $((report_cap - REPORT_MARGIN_S)) --output "$outdir/gpu_report.md" --json "$outdir/gpu_report.json")
echo "python ${report[*]}" >"$outdir/gpu_report.log"
stage report "$report_cap" "$outdir/gpu_report.log" "$PYTHON" "${report[@]}"

printf '%-8s %4d s  (budget %d s)\n' total "$SECONDS" "$TOTAL_S" >>"$outdir/timings.txt"
echo "== timings ($outdir/timings.txt)"
cat "$outdir/timings.txt"
echo "== written to $outdir:"
ls "$outdir"
exit "$failed"
