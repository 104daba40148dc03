"""Runs a SavedModel's `serving_default` in a fresh process, as a serving user would load it.

  python tests/saved_model_run.py --dir=SAVED_MODEL --inputs=in.npz --out=out.npz

loads it with `tf.saved_model.load`, calls `signatures["serving_default"]` with the arrays of
in.npz as keyword arguments and writes every output to out.npz. Imports nothing of this project.
"""

import argparse

import numpy as np
import tensorflow as tf


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--dir", required=True)
  parser.add_argument("--inputs", required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  loaded = tf.saved_model.load(args.dir)
  serve = loaded.signatures["serving_default"]
  inputs = {name: tf.constant(value) for name, value in np.load(args.inputs).items()}
  outputs = serve(**inputs)
  np.savez(args.out, **{name: value.numpy() for name, value in outputs.items()})


if __name__ == "__main__":
  main()
