#!/usr/bin/env bash
# shellcheck disable=SC2317  # stop_server, flatten and cleanup run from the traps
# One GPU session's worth of real-server runs (shared/notes/gpu-real-server.md, run 1's shape):
# a random-weight 2.84 B Llama served by `transformers serve --continuous-batching` on one
# H200, and `tpot-locust run` against it twice:
#   run1: 32 decode users, 256-token prompts, 512-token answers, 60 s, 5 s warm-up
#         (benchmarks/gpu/decode-512.yaml: the shape that "measured nothing")
#   run2: scenarios/prefill-burst.yaml, 60 s, every 10 s eight 8,000-token prompts at once
#
# Run from the repository root on the GPU machine, with the wheels in .whl/ (benchmarks/gpu/wheels.txt
# says how to fetch them) carried along and
# $OUT set (the device tool sets it):  bash benchmarks/gpu/window_run.sh
# Everything is bounded: the whole script ends within WINDOW_RUN_BUDGET_S (default 480 s).
# What is left in $OUT (8 files, flat): main.log (this script's output, versions, timings,
# GPU samples), server.log, run1.log, run1_summary.json, run1_histograms.json, and the same
# three for run2. Re-running on a still-warm machine reuses /tmp/site and /tmp/model.
#
# Environment knobs: SERVE_EXTRA_ARGS (more `transformers serve` flags, e.g.
# "--cb-use-cuda-graph"), RUN_EXTRA_ARGS (more `tpot-locust run` options for both runs, e.g.
# "--set duration=90s"), SKIP_RUN1=1 / SKIP_RUN2=1, WINDOW_RUN_BUDGET_S, build_model.py's
# GPU_MODEL_* shape variables; for a rehearsal without a GPU: SERVE_DEVICE=cpu,
# GPU_MODEL_DEVICE=cpu, WINDOW_RUN_EXPECT_PY (the carried wheels' Python), WINDOW_RUN_SITE,
# WINDOW_RUN_MODEL.

set -u -o pipefail

T0=$(date +%s)
BUDGET_S=${WINDOW_RUN_BUDGET_S:-480}
DEADLINE=$((T0 + BUDGET_S))
: "${OUT:?set OUT to the output folder}"
REPO=$(pwd)
WORK=/tmp/window_run
SITE=${WINDOW_RUN_SITE:-/tmp/site}
MODEL=${WINDOW_RUN_MODEL:-/tmp/model}
EXPECT_PY=${WINDOW_RUN_EXPECT_PY:-3.12}
SERVE_DEVICE=${SERVE_DEVICE:-cuda:0}
PORT=8000
HOST=http://127.0.0.1:$PORT
SERVER_PID=""
GPU_MON_PID=""

mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/main.log") 2>&1
TEE_PID=$!

log() { printf '[window_run +%ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
# budget WANT [RESERVE]: WANT seconds, or less so that RESERVE seconds remain before the deadline
budget() {
    local want=$1 reserve=${2:-20} avail
    avail=$(($(left) - reserve))
    ((avail < want)) && want=$avail
    echo "$want"
}

stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    log "stopping the server (process group $SERVER_PID)"
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 15); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 1
    done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null
    kill -KILL "$SERVER_PID" 2>/dev/null
    SERVER_PID=""
}

# flatten N: keep runN's summary and histograms as $OUT/runN_*.json, drop the rest of its folder
flatten() {
    local run=$1 name
    [ -d "$OUT/$run" ] || return 0
    for name in summary histograms; do
        [ -f "$OUT/$run/$name.json" ] && cp "$OUT/$run/$name.json" "$OUT/${run}_$name.json"
    done
    rm -rf "${OUT:?}/$run"
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_server
    [ -n "$GPU_MON_PID" ] && kill "$GPU_MON_PID" 2>/dev/null
    flatten run1
    flatten run2
    if [ -f "$OUT/server.log" ] && [ "$(stat -c %s "$OUT/server.log")" -gt 8000000 ]; then
        tail -c 8000000 "$OUT/server.log" >"$WORK/server.tail" && mv "$WORK/server.tail" "$OUT/server.log"
    fi
    if [ -s "$WORK/gpu.csv" ]; then
        {
            echo "== GPU samples (timestamp, utilization %, memory used), every 5 s"
            cat "$WORK/gpu.csv"
        } >>"$OUT/main.log"
    fi
    log "done, exit $rc, $(($(date +%s) - T0)) s in all; \$OUT holds $(find "$OUT" -type f | wc -l) files:"
    ls -la "$OUT"
    exec >/dev/null 2>&1
    for _ in $(seq 1 20); do
        kill -0 "$TEE_PID" 2>/dev/null || break
        sleep 0.1
    done
    exit "$rc"
}
trap cleanup EXIT
trap 'log "signal received: stopping"; exit 130' INT TERM

# ---- 1. the carried wheels and the project -------------------------------------------------
log "repo $REPO, OUT $OUT, budget ${BUDGET_S} s"
PYV=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
log "python3 is $(command -v python3), version $PYV"
if [ "$PYV" != "$EXPECT_PY" ]; then
    log "the carried wheels are for CPython $EXPECT_PY: stopping"
    exit 2
fi
if ! ls .whl/*.whl >/dev/null 2>&1; then
    log "no wheels in .whl/: carry .whl with this run"
    exit 2
fi
WHEELS=(.whl/*.whl)
log "installing ${#WHEELS[@]} wheels into $SITE"
if ! timeout 180 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$SITE" "${WHEELS[@]}"; then
    log "pip install of the wheels failed"
    exit 2
fi
export PYTHONPATH="$SITE:$REPO" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_UPDATE_CHECK=1 \
    HF_HUB_DISABLE_TELEMETRY=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false

log "versions and the import check"
if ! timeout 120 python3 - "$SERVE_DEVICE" <<'EOF'; then
import importlib.metadata as m
import platform
import sys

names = ["torch", "transformers", "tokenizers", "accelerate", "huggingface-hub", "safetensors",
         "fastapi", "starlette", "pydantic", "uvicorn", "openai", "locust", "gevent",
         "geventhttpclient", "greenlet", "pyzmq", "hdrhistogram", "numpy", "pyyaml", "jinja2",
         "prometheus-client", "typer", "click", "anyio", "httpx", "typing-extensions"]
for name in names:
    try:
        print(f"  {name} {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"  {name} MISSING")
import torch
print(f"  python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda},"
      f" GPU {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NONE'}")
import fastapi, gevent, hdrh.histogram, locust, openai.types.chat, uvicorn, zmq  # noqa
import tpot_locust.cli.main  # noqa
from transformers.utils.import_utils import is_serve_available
from transformers.cli.serve import Serve  # noqa
assert is_serve_available(), "transformers serve's dependencies are missing"
assert torch.cuda.is_available() or not sys.argv[1].startswith("cuda"), "torch sees no GPU"
print("  imports ok")
EOF
    log "the import check failed"
    exit 2
fi
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,utilization.gpu --format=csv
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -l 5 \
        >"$WORK/gpu.csv" 2>&1 &
    GPU_MON_PID=$!
fi

# ---- 2. the random-weight model ------------------------------------------------------------
if [ -f "$MODEL/gpu-model.json" ]; then
    log "reusing the model in $MODEL: $(cat "$MODEL/gpu-model.json")"
else
    t=$(budget 200 280)
    log "building the model in $MODEL (at most $t s)"
    rm -rf "$MODEL"
    if ! timeout -k 10 "$t" python3 benchmarks/gpu/build_model.py "$MODEL"; then
        log "building the model failed"
        rm -rf "$MODEL"
        exit 3
    fi
fi

# ---- 3. the server -------------------------------------------------------------------------
if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1',$PORT))!=0)"; then
    log "something already listens on port $PORT: stopping (a server left from an earlier run?)"
    exit 4
fi
log "starting transformers serve on $HOST, device $SERVE_DEVICE ${SERVE_EXTRA_ARGS:-}"
# its own session and process group (killed whole at the end); its pid from the pid file,
# in case setsid had to fork
rm -f "$WORK/server.pid"
# shellcheck disable=SC2086,SC2016  # SERVE_EXTRA_ARGS: a list of flags; $$, $0 for bash -c
setsid bash -c 'echo $$ >"$0"; exec "$@"' "$WORK/server.pid" \
    python3 -m transformers.cli.transformers serve "$MODEL" --continuous-batching \
    --device "$SERVE_DEVICE" --dtype bfloat16 --host 127.0.0.1 --port "$PORT" ${SERVE_EXTRA_ARGS:-} \
    >"$OUT/server.log" 2>&1 </dev/null &
for _ in $(seq 1 50); do
    [ -s "$WORK/server.pid" ] && break
    sleep 0.1
done
SERVER_PID=$(cat "$WORK/server.pid" 2>/dev/null)
if [ -z "$SERVER_PID" ]; then
    log "the server did not start"
    exit 4
fi

t=$(budget 150 215)
log "waiting for $HOST/v1/models (server pid $SERVER_PID, at most $t s)"
MODEL_ID=""
ready_by=$(($(date +%s) + t))
while [ "$(date +%s)" -lt "$ready_by" ]; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        log "the server exited; its log's tail:"
        tail -n 40 "$OUT/server.log"
        SERVER_PID=""
        exit 4
    fi
    MODEL_ID=$(python3 - "$HOST" 2>/dev/null <<'EOF'
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1] + "/v1/models", timeout=3) as response:
    print(json.load(response)["data"][0]["id"])
EOF
    ) && [ -n "$MODEL_ID" ] && break
    MODEL_ID=""
    sleep 1
done
if [ -z "$MODEL_ID" ]; then
    log "the server was not ready in time; its log's tail:"
    tail -n 40 "$OUT/server.log"
    exit 4
fi
log "server ready, model id '$MODEL_ID'"

# one short streamed request first, so that the first run does not pay the engine's start
t=$(budget 90 210)
log "warm-up request (at most $t s)"
timeout "$t" python3 - "$HOST" "$MODEL_ID" <<'EOF' || log "the warm-up request failed (going on)"
import json, sys, time, urllib.request
body = {"model": sys.argv[2], "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 16, "stream": True}
request = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
started = time.monotonic()
with urllib.request.urlopen(request, timeout=80) as response:
    chunks = sum(1 for line in response if line.startswith(b"data:"))
print(f"  warm-up: HTTP {response.status}, {chunks} data lines in {time.monotonic() - started:.2f} s")
EOF

# ---- 4. the two runs -----------------------------------------------------------------------
# run NAME ARGS...: `tpot-locust run ARGS`, bounded, its output in $OUT/NAME.log
run() {
    local name=$1 rc t
    shift
    t=$(budget 100 20)
    if ((t < 75)); then
        log "$name: skipped, only $(left) s left"
        return 0
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        log "$name: skipped, the server is gone"
        return 0
    fi
    log "$name: tpot-locust run $* (at most $t s)"
    # shellcheck disable=SC2086  # RUN_EXTRA_ARGS: a list of options
    timeout -k 20 "$t" python3 -m tpot_locust run "$@" --host "$HOST" --tokenizer "$MODEL" \
        --out "$OUT/$name" ${RUN_EXTRA_ARGS:-} >"$OUT/$name.log" 2>&1
    rc=$?
    log "$name: exit $rc$( ((rc == 124 || rc == 137)) && echo ' (timed out)'); the end of its output:"
    tail -n 30 "$OUT/$name.log" | cut -c1-160
    flatten "$name"
}

if [ "${SKIP_RUN1:-0}" != 1 ]; then
    run run1 benchmarks/gpu/decode-512.yaml
    sleep 3 # the server cancels the streams cut by the stop
fi
if [ "${SKIP_RUN2:-0}" != 1 ]; then
    run run2 scenarios/prefill-burst.yaml --set duration=60s \
        --set server.ignore_eos=false --set server.min_tokens=false --set server.metrics=false \
        --set classes.long_prompt.prompt_tokens=8000
fi
log "server log's tail:"
tail -n 15 "$OUT/server.log" | cut -c1-200
exit 0
