"""The text steps of NVIDIA's Wikipedia route, written here to time them: formatting and
sentence splitting with sharding (bench/prepare_corpus_speed.py runs each as a process).

NVIDIA's BERT data preparation extracts a dump with WikiExtractor (`<doc ...>` files of about
100 MB, default output), then:
  format  joins each extracted article's lines into one line, its title line left out, a blank
          line after each (one article a line): `format_articles`;
  split   reads every article of that file into memory, splits each into sentences with NLTK's
          `sent_tokenize` (punkt, English model), spreads the articles over the shards and writes
          each shard with a sentence a line and a blank line after each article:
          `split_and_shard`. Both steps run in one process, as NVIDIA's do.
The punkt English model is a download (`nltk.download("punkt")`) that cannot be made here. The
stand-in is `nltk.tokenize.punkt.PunktSentenceTokenizer` trained, unsupervised (its
`PunktTrainer`), on the first --train_mb MB of the articles themselves: the same algorithm with
parameters (abbreviations, collocations, sentence starters) learnt from the text at hand rather
than from the English model's corpus. The parameters hardly change the cost of splitting (on
the synthetic dump's articles an untrained tokenizer took the trained one's CPU time within 5%);
the training, which NVIDIA's route does not do (it loads the model), comes before the start line
"nvidia_wiki_route: start" and is not timed. The shards hold every article (no held-out set).

  python -m bench.nvidia_wiki_route format --extracted=DIR --output=formatted.txt
  python -m bench.nvidia_wiki_route split --input=formatted.txt --output_dir=shards \\
      --num_shards=8 --train_mb=1
"""

import argparse
import glob
import os
import sys
import time

START_LINE = "nvidia_wiki_route: start"


def format_articles(extracted_dir, output_path):
  """WikiExtractor's output -> one article a line, a blank line after each.

  Args:
    extracted_dir: WikiExtractor's -o directory (subdirectories AA, AB, ... of wiki_NN files of
      `<doc id=... title=...>` title line, text lines, `</doc>`).
    output_path: the file to write.

  Returns:
    the number of articles written.
  """
  articles = 0
  with open(output_path, "w", encoding="utf-8", newline="\n") as writer:
    for path in sorted(glob.glob(os.path.join(extracted_dir, "*", "wiki_*"))):
      lines = None
      with open(path, encoding="utf-8") as reader:
        for line in reader:
          if line.startswith("<doc "):
            lines = []
          elif line.startswith("</doc>") and lines is not None:
            # lines[0] is the title WikiExtractor repeats after the <doc> line.
            writer.write(" ".join(l.strip() for l in lines[1:] if l.strip()) + "\n\n")
            articles += 1
            lines = None
          elif lines is not None:
            lines.append(line)
  return articles


def punkt_tokenizer(text):
  """NLTK's punkt sentence tokenizer trained (unsupervised) on `text`: str -> list of str."""
  from nltk.tokenize import punkt  # pylint: disable=g-import-not-at-top
  return punkt.PunktSentenceTokenizer(train_text=text).tokenize


def read_articles(path):
  """Every article (non-empty line) of a one-article-a-line file, in memory, as NVIDIA's
  sharding step holds them."""
  with open(path, encoding="utf-8") as reader:
    return [line.strip() for line in reader if line.strip()]


def split_and_shard(articles, split, output_dir, num_shards):
  """Splits every article into sentences (all held in memory), then writes the shards.

  Args:
    articles: list of str, one article each.
    split: str -> list of sentences.
    output_dir: where shard-NNNNN.txt go.
    num_shards: how many; an article goes to the shard with the fewest sentences so far, so the
      shards hold about as many sentences each.

  Returns:
    dict: articles, sentences, shards (how many were written).
  """
  sentences = [split(article) for article in articles]
  shards = [[] for _ in range(num_shards)]
  sizes = [0] * num_shards
  for article_sentences in sentences:
    smallest = sizes.index(min(sizes))
    shards[smallest].append(article_sentences)
    sizes[smallest] += len(article_sentences)
  os.makedirs(output_dir, exist_ok=True)
  written = 0
  for index, shard in enumerate(shards):
    if not shard:
      continue
    with open(os.path.join(output_dir, "shard-%05d.txt" % index), "w", encoding="utf-8",
              newline="\n") as writer:
      for article_sentences in shard:
        writer.write("".join(s.strip() + "\n" for s in article_sentences if s.strip()) + "\n")
    written += 1
  return dict(articles=len(articles), sentences=sum(sizes), shards=written)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  commands = parser.add_subparsers(dest="command", required=True)
  formatting = commands.add_parser("format", help="WikiExtractor's files -> one article a line")
  formatting.add_argument("--extracted", required=True, help="WikiExtractor's -o directory")
  formatting.add_argument("--output", required=True, help="the one-article-a-line file")
  splitting = commands.add_parser("split", help="articles -> sentences, in shards")
  splitting.add_argument("--input", required=True, help="the one-article-a-line file")
  splitting.add_argument("--output_dir", required=True)
  splitting.add_argument("--num_shards", type=int, default=8)
  splitting.add_argument("--train_mb", type=float, default=1.0,
                         help="MB of the input's start the punkt stand-in is trained on")
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  if args.command == "format":
    print(START_LINE, file=sys.stderr, flush=True)
    print("nvidia_wiki_route: %d articles" % format_articles(args.extracted, args.output),
          file=sys.stderr)
    return 0
  with open(args.input, encoding="utf-8") as reader:
    sample = reader.read(int(args.train_mb * 1e6))
  start = time.time()
  split = punkt_tokenizer(sample)
  print("nvidia_wiki_route: punkt trained on %.1f MB in %.1f s" % (
      len(sample.encode("utf-8")) / 1e6, time.time() - start), file=sys.stderr)
  print(START_LINE, file=sys.stderr, flush=True)
  counts = split_and_shard(read_articles(args.input), split, args.output_dir, args.num_shards)
  print("nvidia_wiki_route: %(articles)d articles, %(sentences)d sentences, %(shards)d shards"
        % counts, file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
