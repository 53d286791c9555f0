#!/usr/bin/env bash
# Prepare a Docker engine and the images the docker-marked tests use:
#   docker.io + debootstrap (if missing), dockerd in the background (if not
#   answering), the bootstrapped base image, and the triton_cumsum tiny image.
# Idempotent: with an engine running and images cached it takes a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
started=$(date +%s)
log() { echo "[docker-setup $(( $(date +%s) - started ))s] $*"; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

engine_up() { "$PYTHON" -c "import docker; docker.from_env(timeout=3).ping()" >/dev/null 2>&1; }
if ! engine_up; then
    log "starting dockerd"
    nohup dockerd >/var/log/rebench-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        engine_up && break
        sleep 1
    done
    if ! engine_up; then
        log "dockerd did not answer within 60 s; its log:"
        tail -n 30 /var/log/rebench-dockerd.log || true
        exit 1
    fi
fi
log "engine answers"

# superseded environment images of earlier runs would fill the disk (each is 1-2 GB)
"$PYTHON" -m rebench.cli.app images gc

"$PYTHON" -m rebench.cli.app images bootstrap
log "base image ready"
"$PYTHON" -m rebench.cli.app envs build triton_cumsum --profile tiny --backend docker
log "triton_cumsum tiny image ready"
