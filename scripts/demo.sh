#!/usr/bin/env bash
# The demo: pretrain a BERT-tiny-sized model on the bundled demo corpus (make data) with two
# Horovod workers, LAMB, accumulation 2 with post-accumulation allreduce; then evaluate, plot the
# log and say where everything is. Last, ask what pretraining bought: fine-tune a classifier
# (which standard-library package a docstring sentence comes from, scripts/build_demo_task.py)
# from the pretrained checkpoint and from random weights, and print both dev accuracies. At the
# default 600 updates the two are within a few points of each other, the pretrained start not
# ahead: docs/FINETUNING.md, "What pretraining buys", has the measurements and the reasons.
#
#   scripts/demo.sh PYTHON [OUTPUT_DIR]
#
# Environment: DEMO_STEPS (optimizer updates, default 600), DEMO_WORKERS (default 2),
# DEMO_FINETUNE_EPOCHS (default 30), DEMO_PRECISION (fp32 or bf16; default bf16 where the CPU has
# bf16 units, else fp32).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${1:?usage: scripts/demo.sh PYTHON [OUTPUT_DIR]}"
out="${2:-$here/output/demo}"
data="$here/data/demo"
steps="${DEMO_STEPS:-600}"
workers="${DEMO_WORKERS:-2}"
finetune_epochs="${DEMO_FINETUNE_EPOCHS:-30}"
cd "$here"

for f in vocab.txt bert_config.json; do
  [ -f "$data/$f" ] || { echo "demo: $data/$f missing: run make data" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out"

# BERT-tiny (bert_configs/tiny.json) with the demo vocabulary's size, as make data writes it.
vocab_size=$(wc -l < "$data/vocab.txt")
cp "$data/bert_config.json" "$out/bert_config.json"

launcher=()
horovod_flag=()
bin_dir="$(dirname "$py")"
build_info=""
if [ "$workers" -gt 1 ] && [ -x "$bin_dir/horovodrun" ]; then
  build_info="$("$bin_dir/horovodrun" --check-build 2>/dev/null || true)"
fi
if grep -q "\[X\] Gloo" <<< "$build_info"; then
  launcher=("$bin_dir/horovodrun" -np "$workers" -H "localhost:$workers" --gloo)
  horovod_flag=(--horovod)
  echo "demo: $workers Horovod workers (horovodrun --gloo), $steps updates" >&2
else
  echo "demo: Horovod is not usable here: training in one process instead" >&2
fi

# bf16 where the CPU has bf16 units (avx512_bf16, amx_bf16), else fp32; DEMO_PRECISION overrides.
precision="${DEMO_PRECISION:-$(TF_CPP_MIN_LOG_LEVEL=2 "$py" -c \
  "from utils.runtime import cpu; print(cpu.fastest_cpu_precision())")}"
precision_flag=()
if [ -n "${DEMO_PRECISION:-}" ]; then
  chosen_by="set by DEMO_PRECISION"
elif [ "$precision" = bf16 ]; then
  chosen_by="this CPU has bf16 units (avx512_bf16 / amx_bf16); DEMO_PRECISION=fp32 for fp32"
else
  chosen_by="this CPU has no bf16 units (avx512_bf16 / amx_bf16); DEMO_PRECISION=bf16 forces bf16"
fi
case "$precision" in
  bf16) precision_flag=(--bf16) ;;
  fp32) ;;
  *) echo "demo: DEMO_PRECISION must be fp32 or bf16, got '$precision'" >&2; exit 2 ;;
esac
echo "demo: precision $precision ($chosen_by)" >&2

# horovodrun loads TensorFlow itself: without this its native INFO lines open the demo's output (the
# workers are quiet by default anyway, utils/runtime/cli.py).
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"
start=$(date +%s)
"${launcher[@]}" "$py" run_pretraining.py "${horovod_flag[@]}" \
  --bert_config_file="$out/bert_config.json" \
  --input_files_dir="$data/seq128/train" \
  --eval_files_dir="$data/seq128/eval" \
  --output_dir="$out" \
  --do_train --do_eval \
  --max_seq_length=128 --max_predictions_per_seq=20 \
  --optimizer_type=lamb --learning_rate=4e-3 \
  --train_batch_size=16 --num_accumulation_steps=2 --allreduce_post_accumulation \
  --num_train_steps="$steps" --num_warmup_steps=$((steps / 10)) \
  --save_checkpoints_steps=200 --display_loss_steps=20 \
  --eval_batch_size=32 --max_eval_steps=1000 "${precision_flag[@]}"
end=$(date +%s)

"$py" -m utils.plot_log "$out/bert_dllog.json" "$out/training.png" >/dev/null
"$py" - "$out/bert_dllog.json" "$vocab_size" <<'EOF'
import math, sys
from utils.runlog import dllogger_setup, plot
log_file, vocab_size = sys.argv[1], int(sys.argv[2])
_, losses = plot.series(dllogger_setup.read_log(log_file)[0], "mlm_loss")
print("demo: masked-LM loss %.2f at the first update -> %.2f at the last (ln(vocab) = %.2f)"
      % (losses[0], losses[-1], math.log(vocab_size)))
EOF
echo "demo: trained and evaluated in $((end - start)) s"
echo "demo: checkpoints   $out/model.ckpt-$steps.*"
echo "demo: dllogger log  $out/bert_dllog.json"
echo "demo: eval results  $out/eval_results.txt"
echo "demo: plot          $out/training.png"
echo "demo: TensorBoard   $bin_dir/tensorboard --logdir $out   (runs train and eval)"
cat "$out/eval_results.txt"

# Fine-tuning: the same settings twice, from the pretrained checkpoint and from random weights.
# Few labelled sentences (50 per package, 300 in all), where pretrained features would count most;
# 30 epochs at 3e-4 are 281 updates, about 40 s a run.
"$py" scripts/build_demo_task.py --task_dir="$out/stdlib_task"
finetune() {  # finetune NAME [--init_checkpoint=...]: its output goes to $out/finetune_NAME.log
  local log="$out/finetune_$1.log"
  if ! "$py" run_classifier.py --task_name=stdlib --data_dir="$out/stdlib_task" \
    --vocab_file="$data/vocab.txt" --bert_config_file="$out/bert_config.json" \
    --output_dir="$out/finetune_$1" --do_train --do_eval "${@:2}" \
    --max_seq_length=64 --train_batch_size=32 --eval_batch_size=64 \
    --learning_rate=3e-4 --num_train_epochs="$finetune_epochs" --warmup_proportion=0.1 \
    --save_checkpoints_steps=100000 --display_loss_steps=100 >"$log" 2>&1; then
    echo "demo: fine-tuning '$1' failed; the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
accuracy() {  # accuracy NAME: eval_accuracy of that run's eval_results.txt
  awk -F' = ' '$1 == "eval_accuracy" { printf "%.3f", $2 }' "$out/finetune_$1/eval_results.txt"
}
start=$(date +%s)
finetune pretrained --init_checkpoint="$out/model.ckpt-$steps"
finetune random
end=$(date +%s)
pretrained=$(accuracy pretrained)
random=$(accuracy random)
echo "demo: fine-tuned twice in $((end - start)) s ($finetune_epochs epochs each, $out/finetune_*)"
echo "demo: fine-tuning results $out/finetune_pretrained/eval_results.txt $out/finetune_random/eval_results.txt"
echo "demo: stdlib-package dev accuracy from the pretrained checkpoint: $pretrained"
echo "demo: stdlib-package dev accuracy from random weights:            $random"

# Hand-off: the command that writes the pretrained checkpoint for Hugging Face transformers
# (docs/HANDOFF.md); printed, not run.
echo "demo: for Hugging Face transformers (BertForPreTraining.from_pretrained), run:"
echo "  $py -m utils.export_release --format=huggingface --checkpoint=$out/model.ckpt-$steps" \
  "--bert_config_file=$out/bert_config.json --vocab_file=$data/vocab.txt" \
  "--do_lower_case=true --output_dir=$out/huggingface"
