#!/usr/bin/env bash
# The demo: pretrain a BERT-tiny-sized model on the bundled demo corpus (make data) with two
# Horovod workers, LAMB, accumulation 2 with post-accumulation allreduce; then evaluate, plot the
# log and say where everything is. Last, what the pretraining learnt: its masked-LM accuracy on
# the held-out records beside the unigram baseline's (always predicting the commonest masked
# token), and what a longer pretraining buys a classifier, as bench/quality.py measured it
# (docs/quality.json, docs/FINETUNING.md): the demo's few hundred updates are too few for a
# fine-tuned classifier to gain from them.
#
#   scripts/demo.sh PYTHON [OUTPUT_DIR]
#
# Environment: DEMO_STEPS (optimizer updates, default 600), DEMO_WORKERS (default 2),
# DEMO_PRECISION (fp32 or bf16; default bf16 where the CPU has bf16 units, else fp32).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${1:?usage: scripts/demo.sh PYTHON [OUTPUT_DIR]}"
out="${2:-$here/output/demo}"
data="$here/data/demo"
steps="${DEMO_STEPS:-600}"
workers="${DEMO_WORKERS:-2}"
cd "$here"

for f in vocab.txt bert_config.json; do
  [ -f "$data/$f" ] || { echo "demo: $data/$f missing: run make data" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out"

# BERT-tiny (bert_configs/tiny.json) with the demo vocabulary's size, as make data writes it.
cp "$data/bert_config.json" "$out/bert_config.json"

# One python start answers both questions (horovodrun --check-build imports TensorFlow once per
# framework it checks: 13 s here): whether Horovod has Gloo, and the CPU's fastest precision.
answers="$(TF_CPP_MIN_LOG_LEVEL=3 "$py" -c "from utils.runtime import cpu, hvd_utils
print(hvd_utils.gloo_built(), cpu.fastest_cpu_precision())")"
read -r gloo fastest <<< "$answers"

launcher=()
horovod_flag=()
bin_dir="$(dirname "$py")"
if [ "$workers" -gt 1 ] && [ -x "$bin_dir/horovodrun" ] && [ "$gloo" = True ]; then
  launcher=("$bin_dir/horovodrun" -np "$workers" -H "localhost:$workers" --gloo)
  horovod_flag=(--horovod)
  echo "demo: $workers Horovod workers (horovodrun --gloo), $steps updates" >&2
else
  echo "demo: Horovod is not usable here: training in one process instead" >&2
fi

# bf16 where the CPU has bf16 units (avx512_bf16, amx_bf16), else fp32; DEMO_PRECISION overrides.
precision="${DEMO_PRECISION:-$fastest}"
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

echo "demo: trained and evaluated in $((end - start)) s"
echo "demo: checkpoints   $out/model.ckpt-$steps.*"
echo "demo: dllogger log  $out/bert_dllog.json"
echo "demo: eval results  $out/eval_results.txt"
echo "demo: plot          $out/training.png"
echo "demo: TensorBoard   $bin_dir/tensorboard --logdir $out   (runs train and eval)"
cat "$out/eval_results.txt"
# The plot, then what the pretraining learnt (one python start for both).
TF_CPP_MIN_LOG_LEVEL=2 "$py" scripts/demo_summary.py --run_log="$out/bert_dllog.json" \
  --plot="$out/training.png" --eval_results="$out/eval_results.txt" \
  --eval_files_dir="$data/seq128/eval" --vocab_file="$data/vocab.txt" --python="$py"

# Hand-off: the command that writes the pretrained checkpoint for Hugging Face transformers
# (docs/HANDOFF.md); printed, not run.
echo "demo: for Hugging Face transformers (BertForPreTraining.from_pretrained), run:"
echo "  $py -m utils.export_release --format=huggingface --checkpoint=$out/model.ckpt-$steps" \
  "--bert_config_file=$out/bert_config.json --vocab_file=$data/vocab.txt" \
  "--do_lower_case=true --output_dir=$out/huggingface"
