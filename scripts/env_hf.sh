#!/usr/bin/env bash
# The second environment: transformers and CPU PyTorch (requirements-hf.txt), for the tests that
# load the Hugging Face export with the real clients (tests/test_checkpoints_huggingface.py runs
# tests/hf/hf_client.py in it). transformers 5 and PyTorch need numpy 2, which TensorFlow 2.15
# cannot share, so it lives beside the main environment (scripts/env.sh), cached the same way:
# keyed on requirements-hf.txt, this script and the python version, created on first use, and its
# python printed as the last line of stdout (everything else on stderr):
#
#   HF_PY=$(scripts/env_hf.sh | tail -n 1)
#
# A separate script so that the main environment's key (scripts/env.sh's own text) stays as it is.
# Override the location with BERT_ENV_ROOT, the python with BERT_BASE_PYTHON.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
req="$here/requirements-hf.txt"
root="${BERT_ENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/bert-tf1-pretraining}"
base_python="${BERT_BASE_PYTHON:-python3}"

log() { echo "[env-hf] $*" >&2; }
die() { echo "[env-hf] ERROR: $*" >&2; exit 1; }

[ -f "$req" ] || die "requirements file not found: $req"
key="$( (cat "$req" "${BASH_SOURCE[0]}"; "$base_python" --version 2>&1) | sha256sum | cut -c1-16)"
venv="$root/venv-hf-$key"
py="$venv/bin/python"

if [ -f "$venv/.ready" ] && [ -x "$py" ]; then echo "$py"; exit 0; fi
mkdir -p "$root"
# One builder at a time: a second caller waits for the first and then reuses its result.
exec 9>"$root/.lock-hf-$key"
flock 9
if [ -f "$venv/.ready" ] && [ -x "$py" ]; then echo "$py"; exit 0; fi

log "creating $venv (transformers + CPU PyTorch; about 1.5 minutes and 1.2 GB once)"
rm -rf "$venv"
"$base_python" -m venv "$venv" || die "$base_python -m venv failed"
pip=("$py" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade "pip<25" wheel >&2
"${pip[@]}" install -q -r "$req" >&2 || die "pip install -r requirements-hf.txt failed"
"$py" - <<'PYEOF' >&2 || die "the hf environment does not import what it should"
import torch, transformers
assert not torch.version.cuda, "a CUDA build of PyTorch was installed: %s" % torch.version.cuda
print("torch", torch.__version__, "transformers", transformers.__version__)
PYEOF

touch "$venv/.ready"
log "environment ready"
echo "$py"
