"""The Hugging Face side of the export tests, run with the second environment's python
(`scripts/env_hf.sh`: transformers and CPU PyTorch), never imported by the TensorFlow tests.

  python tests/hf/hf_client.py forward  --model_dir=D --batch=in.npz --out=out.npz
      BertForPreTraining.from_pretrained(D, output_loading_info=True) on a batch: writes
      sequence_output, pooled_output, mlm_logits [batch, seq, vocab], nsp_logits [batch, 2];
      prints the loading info (missing / unexpected / mismatched keys, errors) as JSON.
  python tests/hf/hf_client.py tokenize --model_dir=D --text=lines.txt --out=ids.json
      BertTokenizerFast.from_pretrained(D): the ids of each line, without special tokens.
  python tests/hf/hf_client.py dump     --model_dir=D --out=tensors.npz
      the tensors of D's weights file as read by the safetensors package or torch.load.
  python tests/hf/hf_client.py formats  --out_dir=D
      tensors of every dtype and layout the readers meet (fp32, fp16, bf16, int64, a transposed
      view, a slice, shared storage, a scalar) saved by torch.save (D/t.bin) and by the
      safetensors package (D/t.safetensors), with float32 / int64 copies in D/reference.npz.
  python tests/hf/hf_client.py save     --config=config.json --out_dir=D [--class=NAME]
      [--pytorch_bin] [--seed=0]
      a randomly initialised transformers model of class NAME (BertForPreTraining) saved with
      save_pretrained; --pytorch_bin replaces model.safetensors by torch.save's pytorch_model.bin.
  python tests/hf/hf_client.py serve
      runs the commands above one after another, each a JSON list of arguments on a line of
      stdin, answering each with a JSON line {"ok", "stdout", "error"}: torch and transformers
      are imported once for a whole test module.
"""

import argparse
import contextlib
import io
import json
import os
import sys
import traceback

import numpy as np
import torch
import transformers


def forward(args):
  model, info = transformers.BertForPreTraining.from_pretrained(
      args.model_dir, output_loading_info=True)
  model.eval()
  batch = np.load(args.batch)
  inputs = dict(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long))
  with torch.no_grad():
    encoded = model.bert(**inputs)
    heads = model(**inputs)
  np.savez(args.out,
           sequence_output=encoded.last_hidden_state.numpy(),
           pooled_output=encoded.pooler_output.numpy(),
           mlm_logits=heads.prediction_logits.numpy(),
           nsp_logits=heads.seq_relationship_logits.numpy())
  print(json.dumps({key: sorted(str(v) for v in value) for key, value in info.items()}))


def tokenize(args):
  tokenizer = transformers.BertTokenizerFast.from_pretrained(args.model_dir)
  with open(args.text, encoding="utf-8") as f:
    lines = [line.rstrip("\n") for line in f]
  ids = [tokenizer(line, add_special_tokens=False)["input_ids"] for line in lines]
  with open(args.out, "w") as f:
    json.dump({"class": type(tokenizer).__name__, "ids": ids}, f)


def dump(args):
  path = os.path.join(args.model_dir, "model.safetensors")
  if os.path.exists(path):
    from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
    tensors = load_file(path)
  else:
    state = torch.load(os.path.join(args.model_dir, "pytorch_model.bin"), weights_only=True)
    tensors = {name: value.numpy() for name, value in state.items()}
  np.savez(args.out, **tensors)


def save(args):
  with open(args.config) as f:
    config = transformers.BertConfig(**json.load(f)) if args.model_class.startswith("Bert") \
        else transformers.AutoConfig.for_model(**json.load(f))
  torch.manual_seed(args.seed)
  model = getattr(transformers, args.model_class)(config)
  model.save_pretrained(args.out_dir)
  if args.pytorch_bin:
    os.remove(os.path.join(args.out_dir, "model.safetensors"))
    torch.save(model.state_dict(), os.path.join(args.out_dir, "pytorch_model.bin"))


def formats(args):
  import collections  # pylint: disable=g-import-not-at-top
  from safetensors.torch import save_file  # pylint: disable=g-import-not-at-top
  torch.manual_seed(0)
  base = torch.randn(5, 3)
  state = collections.OrderedDict([
      ("f32", base), ("f32_transposed", base.t()), ("f32_slice", base[1:, 1:]),
      ("f32_shared", base), ("f16", torch.randn(4, 2).half()),
      ("bf16", torch.randn(3, 2).bfloat16()), ("i64", torch.arange(6, dtype=torch.int64)),
      ("scalar", torch.tensor(3.5))])
  os.makedirs(args.out_dir, exist_ok=True)
  torch.save(state, os.path.join(args.out_dir, "t.bin"))
  save_file({name: value.contiguous() for name, value in state.items() if name != "f32_shared"},
            os.path.join(args.out_dir, "t.safetensors"), metadata={"format": "pt"})
  np.savez(os.path.join(args.out_dir, "reference.npz"),
           **{name: (value.float() if value.dtype in (torch.bfloat16, torch.float16)
                     else value).numpy() for name, value in state.items()})


COMMANDS = {"forward": forward, "tokenize": tokenize, "dump": dump, "save": save,
            "formats": formats}


def parse(argv):
  parser = argparse.ArgumentParser()
  parser.add_argument("command", choices=sorted(COMMANDS))
  parser.add_argument("--model_dir")
  parser.add_argument("--batch")
  parser.add_argument("--text")
  parser.add_argument("--out")
  parser.add_argument("--config")
  parser.add_argument("--out_dir")
  parser.add_argument("--class", dest="model_class", default="BertForPreTraining")
  parser.add_argument("--pytorch_bin", action="store_true")
  parser.add_argument("--seed", type=int, default=0)
  return parser.parse_args(argv)


def serve():
  for line in sys.stdin:
    printed = io.StringIO()
    try:
      with contextlib.redirect_stdout(printed):
        args = parse(json.loads(line))
        COMMANDS[args.command](args)
      answer = {"ok": True, "stdout": printed.getvalue(), "error": ""}
    except BaseException:  # pylint: disable=broad-except
      answer = {"ok": False, "stdout": printed.getvalue(), "error": traceback.format_exc()}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main():
  if sys.argv[1:] == ["serve"]:
    serve()
    return
  args = parse(sys.argv[1:])
  COMMANDS[args.command](args)


if __name__ == "__main__":
  main()
