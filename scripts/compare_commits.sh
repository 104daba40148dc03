#!/usr/bin/env bash
# Do two commits train the same? Runs the same deterministic jobs in a worktree of each and
# compares their logged losses and every variable of their final checkpoints, bit for bit:
#
#   scripts/compare_commits.sh BEFORE AFTER [WORK_DIR]
#
# The jobs (docs/REGRESSION.md's settings, 30 updates): run_pretraining.py on BERT-tiny with
# dropout and --deterministic_run in one process ("one"), in two Horovod workers (horovodrun --gloo,
# "two") and in one process with --bf16 ("bf16"), and run_squad.py on a dropout-free config
# ("squad"; a --deterministic_run fine-tuning run keeps dropout since the restructuring and drew
# none before). Needs the demo data (make data) and the environment (scripts/env.sh). Prints one
# line per job; exits 1 when any differs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
before="${1:?usage: scripts/compare_commits.sh BEFORE AFTER [WORK_DIR]}"
after="${2:?usage: scripts/compare_commits.sh BEFORE AFTER [WORK_DIR]}"
work="${3:-$(mktemp -d /tmp/compare_commits.XXXXXX)}"
py="$("$here/scripts/env.sh" | tail -n 1)"
horovodrun="$(dirname "$py")/horovodrun"
data="$here/data/demo/seq128/train"
[ -d "$data" ] || { echo "compare_commits: $data missing: run make data" >&2; exit 2; }

mkdir -p "$work"
cleanup() {
  for name in before after; do
    git -C "$here" worktree remove --force "$work/$name" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT
for name in before after; do
  commit=$([ "$name" = before ] && echo "$before" || echo "$after")
  rm -rf "$work/$name"
  git -C "$here" worktree add --detach -f "$work/$name" "$commit" >/dev/null
done
# SQuAD data, vocabulary and a dropout-free config from the test helpers.
(cd "$work/after" && "$py" - "$work" <<'EOF'
import sys
from tests import finetuning_data as fd
work = sys.argv[1]
fd.write_squad(work + "/squad.json", False, repeat=2)
fd.write_bert_config(work + "/ft_config.json", fd.write_vocab(work + "/vocab.txt"), dropout=0.0)
EOF
)
pretraining=(--bert_config_file="$here/bert_configs/tiny.json" --input_files_dir="$data"
  --max_seq_length=128 --max_predictions_per_seq=20 --train_batch_size=8
  --num_accumulation_steps=2 --num_train_steps=30 --num_warmup_steps=5 --learning_rate=1e-3
  --display_loss_steps=1 --save_checkpoints_steps=30 --do_train --deterministic_run)
squad=(--vocab_file="$work/vocab.txt" --bert_config_file="$work/ft_config.json"
  --train_file="$work/squad.json" --do_train --max_seq_length=48 --doc_stride=16
  --max_query_length=12 --train_batch_size=4 --num_train_epochs=2 --learning_rate=1e-3
  --deterministic_run --save_checkpoints_steps=1000)
for name in before after; do
  out="$work/out-$name"
  rm -rf "$out" && mkdir -p "$out"
  cd "$work/$name"
  "$py" run_pretraining.py "${pretraining[@]}" --output_dir="$out/one" > "$out/one.log" 2>&1
  timeout 600 "$horovodrun" -np 2 -H localhost:2 --gloo "$py" run_pretraining.py \
    "${pretraining[@]}" --horovod --output_dir="$out/two" > "$out/two.log" 2>&1
  "$py" run_pretraining.py "${pretraining[@]}" --bf16 --output_dir="$out/bf16" > "$out/bf16.log" 2>&1
  "$py" run_squad.py "${squad[@]}" --output_dir="$out/squad" > "$out/squad.log" 2>&1
done
cd "$here"
TF_CPP_MIN_LOG_LEVEL=2 "$py" - "$work" <<'EOF'
import os, sys
import tensorflow as tf
from utils.checkpoints import contents
from utils.runlog import golden
work = sys.argv[1]

same = True
for job in ("one", "two", "bf16", "squad"):
  a, b = (os.path.join(work, "out-" + name, job) for name in ("before", "after"))
  ca, cb = tf.train.latest_checkpoint(a), tf.train.latest_checkpoint(b)
  shapes_a, shapes_b = contents.checkpoint_shapes(ca), contents.checkpoint_shapes(cb)
  values_a, values_b = contents.read_tensors(ca, shapes_a), contents.read_tensors(cb, shapes_b)
  differing = [n for n in sorted(set(values_a) & set(values_b))
               if values_a[n].tobytes() != values_b[n].tobytes()]
  # The golden-loss tool's comparison (docs/REGRESSION.md), tolerance 0: every tracked value.
  entries_a, entries_b = (golden.log_entries(os.path.join(d, "bert_dllog.json")) for d in (a, b))
  log_differences = golden.differences(entries_a, entries_b, tolerance=0)
  ok = shapes_a == shapes_b and not differing and not log_differences
  same = same and ok
  print("%s %s: %s / %s, %d variables, %d differ%s; %d logged steps, %d differences" % (
      "same" if ok else "DIFFERENT", job, os.path.basename(ca), os.path.basename(cb),
      len(shapes_a), len(differing), (" (%s)" % ", ".join(differing[:5])) if differing else "",
      len(entries_a), len(log_differences)))
sys.exit(0 if same else 1)
EOF
