#!/usr/bin/env bash
# The demo: pretrain a BERT-tiny-sized model on the bundled demo corpus (make data) with two
# Horovod workers, LAMB, accumulation 2 with post-accumulation allreduce; then evaluate, plot the
# log and say where everything is. Last, what the pretraining learnt: its masked-LM accuracy on
# the held-out records beside the unigram baseline's (always predicting the commonest masked
# token), and what a longer pretraining buys a classifier, as the earlier bench/quality.py
# measured it (docs/quality.json, docs/FINETUNING.md): the demo's few hundred updates are too few
# for a fine-tuned classifier to gain from them.
#
#   scripts/demo.sh PYTHON [OUTPUT_DIR]
#
# Environment: DEMO_STEPS (optimizer updates, default 600), DEMO_WORKERS (default 2),
# DEMO_PRECISION (fp32 or bf16; default: the faster of the two here, measured by the model's own
# products in fp32 and bf16, once per machine: utils/runtime/bf16_probe.py).
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
# framework it checks: 13 s here): whether Horovod has Gloo, and which of fp32 and bf16 computes
# the demo's model (batch 16 x seq 128) faster here: "<precision> <the measured reason>".
answers="$(TF_CPP_MIN_LOG_LEVEL=3 "$py" -c "import sys
from utils.runtime import bf16_probe, hvd_utils
print(hvd_utils.gloo_built())
bf16_probe.main(sys.argv)" "$out/bert_config.json" 16 128)"
gloo="$(sed -n 1p <<< "$answers")"
read -r fastest measured <<< "$(sed -n 2p <<< "$answers")"

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

# The faster of fp32 and bf16 as measured (--precision=auto: the job takes the same cached
# measurement and its start line says it again); DEMO_PRECISION overrides.
if [ -n "${DEMO_PRECISION:-}" ]; then
  precision="$DEMO_PRECISION"
  chosen_by="set by DEMO_PRECISION; measured here: $measured"
else
  precision="$fastest"
  chosen_by="$measured; DEMO_PRECISION=fp32 or bf16 overrides"
fi
case "${DEMO_PRECISION:-}" in
  ""|bf16|fp32) precision_flag=(--precision="${DEMO_PRECISION:-auto}") ;;
  *) echo "demo: DEMO_PRECISION must be fp32 or bf16, got '$DEMO_PRECISION'" >&2; exit 2 ;;
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
