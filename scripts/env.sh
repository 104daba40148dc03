#!/usr/bin/env bash
# Creates (when missing) and reuses the project's virtualenv, then prints the absolute path of its
# python as the last line of stdout. Everything else goes to stderr, so callers can capture the path:
#
#   PY=$(scripts/env.sh | tail -n 1)
#
# The environment lives outside the clone, keyed on requirements.txt and this script, so a fresh
# clone on a machine that already built it starts in seconds. Override the location with
# BERT_ENV_ROOT. Horovod is built from source after TensorFlow (docs/DESIGN.md section 1).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
req="$here/requirements.txt"
root="${BERT_ENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/bert-tf1-pretraining}"
base_python="${BERT_BASE_PYTHON:-python3}"

log() { echo "[env] $*" >&2; }
die() { echo "[env] ERROR: $*" >&2; exit 1; }

[ -f "$req" ] || die "requirements file not found: $req"

have_openmpi() { command -v mpirun >/dev/null 2>&1 && command -v mpicc >/dev/null 2>&1; }

# 1. OpenMPI from Debian when missing and we may install it; otherwise Gloo only.
if ! have_openmpi; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    log "installing Debian packages openmpi-bin libopenmpi-dev"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev >&2 \
      || die "apt-get install openmpi-bin libopenmpi-dev failed"
  else
    log "OpenMPI is not installed and this user cannot install it (not root):"
    log "Horovod will be built with Gloo only (launch with horovodrun --gloo)."
  fi
fi
if have_openmpi; then mpi_flavour=mpi; else mpi_flavour=gloo; fi

key="$( (cat "$req" "${BASH_SOURCE[0]}"; "$base_python" --version 2>&1; echo "$mpi_flavour") \
        | sha256sum | cut -c1-16)"
venv="$root/venv-$key"
py="$venv/bin/python"

if [ -f "$venv/.ready" ] && [ -x "$py" ]; then
  echo "$py"
  exit 0
fi

mkdir -p "$root"
# One builder at a time: a second caller waits for the first and then reuses its result.
exec 9>"$root/.lock-$key"
flock 9
if [ -f "$venv/.ready" ] && [ -x "$py" ]; then
  echo "$py"
  exit 0
fi

log "creating $venv (this takes about 5 minutes once; later runs reuse it)"
rm -rf "$venv"
"$base_python" -m venv "$venv" || die "$base_python -m venv failed"
pip=("$py" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade "pip<25" wheel "setuptools<70" >&2

horovod_req="$(grep -E '^horovod==' "$req" || true)"
[ -n "$horovod_req" ] || die "requirements.txt has no pinned horovod== line"
tmp_req="$(mktemp)"
trap 'rm -f "$tmp_req"' EXIT
grep -vE '^horovod==' "$req" > "$tmp_req"

log "installing TensorFlow and the other requirements"
"${pip[@]}" install -q -r "$tmp_req" >&2 || die "pip install -r requirements.txt failed"

log "building $horovod_req with TensorFlow + Gloo$( [ "$mpi_flavour" = mpi ] && echo ' + MPI')"
export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1
if [ "$mpi_flavour" = mpi ]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
export MAKEFLAGS="-j$(nproc)"
"${pip[@]}" install -q --no-build-isolation --no-cache-dir "$horovod_req" >&2 \
  || die "building $horovod_req failed (see the compiler output above)"

# 2. Horovod must have been built with what we asked for; fail loudly otherwise.
check="$("$venv/bin/horovodrun" --check-build 2>&1)" || die "horovodrun --check-build failed: $check"
echo "$check" >&2
need=("TensorFlow" "Gloo")
[ "$mpi_flavour" = mpi ] && need+=("MPI")
for framework in "${need[@]}"; do
  echo "$check" | grep -qE "\[X\] $framework\b" \
    || die "horovodrun --check-build does not list $framework as built"
done
"$py" - <<'EOF' >&2 || die "the new environment does not import what it should"
import tensorflow as tf, tensorflow_estimator, horovod.tensorflow as hvd
assert tf.__version__ == "2.15.1", tf.__version__
print("tensorflow", tf.__version__, "horovod", __import__("horovod").__version__)
EOF

touch "$venv/.ready"
log "environment ready"
echo "$py"
