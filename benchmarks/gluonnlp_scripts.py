"""GluonNLP 0.10.x's own BERT scripts, unmodified, under ``mxmixed run``: float32 beside float16.

The three scripts of GluonNLP 0.10.x with a float16 switch (``scripts/bert/``:
``finetune_classifier.py``, ``finetune_squad.py``, ``run_pretraining.py``) are outside clients:
they are never copied into this repository. A person fetches them and names the folder::

    git clone https://github.com/dmlc/gluon-nlp /tmp/gluon-nlp
    mkdir -p /tmp/gnlp/v0.10.0 /tmp/gnlp/head
    git -C /tmp/gluon-nlp archive v0.10.0 scripts/bert | tar -x -C /tmp/gnlp/v0.10.0
    git -C /tmp/gluon-nlp archive origin/v0.10.x scripts/bert | tar -x -C /tmp/gnlp/head
    python benchmarks/gluonnlp_scripts.py --scripts v0.10.0=/tmp/gnlp/v0.10.0/scripts/bert \\
        --scripts head=/tmp/gnlp/head/scripts/bert

Everything else is made offline in a temporary folder (nothing is downloaded; the scripts would
download a vocabulary, pretrained weights and the data sets, each checked by SHA-1):

* a vocabulary of the synthetic words below, and a tiny ``bert_12_768_12`` (2 layers, 32 units,
  2 heads) with random weights, saved for the scripts' ``--pretrained_bert_parameters``; a
  ``sitecustomize.py`` on ``PYTHONPATH`` shrinks ``bert_12_768_12``'s sizes, reads that
  vocabulary instead of downloading one and lets ``gluonnlp.data.SQuAD`` read its files
  without their SHA-1 (the scripts themselves run as GluonNLP ships them);
* ``ChnSentiCorp`` (its loader checks no SHA-1): sentences of filler words with three
  sentiment words, label by sentiment (``train.tsv``/``dev.tsv``/``test.tsv``, a ``.tgz``);
* SQuAD 1.1 (``train-v1.1.json``, ``dev-v1.1.json``): "what colour is the X ?" over a paragraph
  that names the colour of several things; the answer is the colour of X;
* raw pre-training text (``--raw``): documents of sentences "the X is COLOUR ." and others.

Each script runs through ``python -m mxmixed.run --report R`` as float32 and with its float16
switch (the classifier also with ``--unscale-before-clip``), with its own ``DataLoader``
workers and process pools, each run bounded by ``--limit`` seconds. The table gives the
script's own logged numbers (training loss first and last, the dev metric), the runner's
report (steps, skipped steps, loss scale, scaled-clipping call sites), the exit code, and
whether a worker printed a traceback. ``--json PATH`` writes it all.
It says nothing about speed (the emulation is for numerics).

``run_pretraining.py`` seeds MXNet from an unseeded ``random.randint``, so its runs differ from
one another: it runs ``--repeats`` times (3) in each mode, and the float16 runs are read against
the spread of the float32 ones.

Usage: ``python benchmarks/gluonnlp_scripts.py --scripts NAME=DIR [--scripts NAME=DIR ...]
[--only classifier squad pretraining] [--repeats N] [--work DIR] [--limit S] [--json PATH]``
"""
import argparse
import collections
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

POS = ["good", "great", "fine", "lovely", "superb", "pleasant", "bright", "warm"]
NEG = ["bad", "awful", "poor", "dreadful", "grim", "dull", "bleak", "cold"]
FILL = ["the", "a", "movie", "film", "plot", "was", "is", "and", "very", "quite", "story",
        "acting", "music", "ending", "it", "this", "of", "with", "really", "overall"]
THINGS = ["car", "house", "door", "hat", "boat", "kite", "cup", "chair", "shirt", "bird", "ball",
          "box"]
COLOURS = ["red", "blue", "green", "yellow", "black", "white", "pink", "grey"]
QA = ["what", "colour", "which", "one", "?", ".", "next", "to", "stands", "old", "new", "my",
      "his", "her", "on", "in", "small", "big"]

TINY = {"num_layers": 2, "units": 32, "hidden_size": 64, "num_heads": 2, "max_length": 64,
        "embed_size": 32}
SITECUSTOMIZE = '''"""Offline stand-ins for what GluonNLP 0.10's BERT scripts download: with TINY_BERT_VOCAB
set, bert_12_768_12 is a 2-layer, 32-unit BERT whose vocabulary is read from that file, and
gluonnlp.data.SQuAD reads the files it finds without their SHA-1. The scripts are not modified."""
import os

if os.environ.get("TINY_BERT_VOCAB"):
    import gluonnlp.data.question_answering as _qa
    import gluonnlp.model.bert as _bert
    from gluonnlp.vocab import BERTVocab as _BERTVocab

    _bert.bert_12_768_12_hparams.update(%r)

    def _load_vocab(dataset_name, vocab, root, cls=None):
        with open(os.environ["TINY_BERT_VOCAB"]) as f:
            return _BERTVocab.from_json(f.read())

    _bert._load_vocab = _load_vocab
    _qa.SQuAD._get_data = lambda self: None
'''

# name, script, arguments (the work folder is {work}), the float16 modes to run beside float32
SCRIPTS = {
    "classifier": ("finetune_classifier.py", [
        "--task_name", "ChnSentiCorp", "--bert_dataset", "book_corpus_wiki_en_uncased",
        "--pretrained_bert_parameters", "{work}/tiny_bert.params", "--batch_size", "16",
        "--dev_batch_size", "32", "--epochs", "8", "--lr", "1e-3", "--max_len", "16",
        "--round_to", "16", "--log_interval", "4", "--seed", "2"],
        [["--dtype", "float16"]], True),
    "squad": ("finetune_squad.py", [
        "--pretrained_bert_parameters", "{work}/tiny_bert.params", "--batch_size", "16",
        "--test_batch_size", "32", "--epochs", "24", "--lr", "1e-3", "--max_seq_length", "64",
        "--max_query_length", "16", "--doc_stride", "32", "--round_to", "16",
        "--log_interval", "4"],
        [["--dtype", "float16"]], False),
    "pretraining": ("run_pretraining.py", [
        "--raw", "--data", "{work}/pretrain/train-*.txt", "--data_eval", "{work}/pretrain/dev.txt",
        "--max_seq_length", "32", "--max_predictions_per_seq", "5", "--total_batch_size", "16",
        "--total_batch_size_eval", "16", "--num_steps", "200", "--log_interval", "25",
        "--lr", "1e-3", "--warmup_ratio", "0.1", "--ckpt_dir", "ckpt", "--ckpt_interval", "1000",
        "--eval_interval", "1000"],
        [["--dtype", "float16"]], False),
}
FLOAT32 = {"pretraining": ["--dtype", "float32"]}  # its default is float16
UNSEEDED = {"pretraining"}  # random.randint(0, 1000) from an unseeded generator seeds MXNet


def sentiment_rows(rng, n):
    """``(label, sentence)`` pairs: filler words with three words of the label's sentiment."""
    rows = []
    for i in range(n):
        label = i % 2
        words = [rng.choice(FILL) for _ in range(rng.randint(2, 5))]
        for _ in range(3):
            words.insert(rng.randint(0, len(words)), rng.choice(POS if label else NEG))
        rows.append((str(label), " ".join(words)))
    rng.shuffle(rows)
    return rows


def write_chnsenticorp(home, rng):
    """ChnSentiCorp's three TSV files and their archive under ``home/datasets``."""
    folder = os.path.join(home, "datasets", "baidu_ernie_data", "task_data", "chnsenticorp")
    os.makedirs(folder, exist_ok=True)
    for segment, n in (("train", 128), ("dev", 64), ("test", 16)):
        rows = sentiment_rows(rng, n)
        with open(os.path.join(folder, segment + ".tsv"), "w") as f:
            if segment == "test":
                f.write("qid\ttext_a\n")
                f.writelines("%d\t%s\n" % (i, s) for i, (_, s) in enumerate(rows))
            else:
                f.write("label\ttext_a\n")
                f.writelines("%s\t%s\n" % row for row in rows)
    archive = os.path.join(home, "datasets", "baidu_ernie_data", "task_data.tgz")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(os.path.dirname(folder), arcname="task_data")


def colour_facts(rng, k):
    """``k`` distinct things, each with a colour, as sentences "the X is C ." and the pairs."""
    things = rng.sample(THINGS, k)
    pairs = [(thing, rng.choice(COLOURS)) for thing in things]
    extra = ["%s %s" % (rng.choice(["my", "his", "her"]), rng.choice(["old", "new", "small",
                                                                      "big"]))
             for _ in range(k)]
    sentences = ["the %s %s is %s ." % (e.split()[1], t, c) for (t, c), e in zip(pairs, extra)]
    return sentences, pairs


def squad_file(rng, n_paragraphs, tag):
    """SQuAD 1.1's JSON layout: paragraphs, each with one question per thing it colours."""
    paragraphs = []
    for p in range(n_paragraphs):
        sentences, pairs = colour_facts(rng, 3)
        context = " ".join(sentences)
        qas = []
        for q, (thing, colour) in enumerate(pairs):
            sentence = next(s for s in sentences if " %s is " % thing in s)
            start = context.index(sentence) + sentence.index(" is ") + 4
            qas.append({"id": "%s-%d-%d" % (tag, p, q), "question": "what colour is the %s ?" % thing,
                        "answers": [{"answer_start": start, "text": colour}]})
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "1.1", "data": [{"title": "colours", "paragraphs": paragraphs}]}


def write_squad(home, rng):
    """``train-v1.1.json`` (96 questions) and ``dev-v1.1.json`` (48) under ``home/datasets/squad``."""
    folder = os.path.join(home, "datasets", "squad")
    os.makedirs(folder, exist_ok=True)
    for name, n in (("train-v1.1.json", 32), ("dev-v1.1.json", 16)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(squad_file(rng, n, name[:3]), f)


def write_pretraining_text(work, rng):
    """Raw text as ``--raw`` reads it: a sentence a line, documents apart by a blank line."""
    folder = os.path.join(work, "pretrain")
    os.makedirs(folder, exist_ok=True)
    for name, documents in (("train-0.txt", 40), ("train-1.txt", 40), ("dev.txt", 16)):
        with open(os.path.join(folder, name), "w") as f:
            for _ in range(documents):
                sentences, _ = colour_facts(rng, 4)
                sentences += [s + " ." for _, s in sentiment_rows(rng, 2)]
                rng.shuffle(sentences)
                f.write("\n".join(sentences) + "\n\n")


def make_model(work):
    """The vocabulary of every synthetic word and a tiny BERT's random weights, saved in ``work``."""
    import gluonnlp as nlp  # only here: the runs load their own stack
    import mxnet as mx
    counter = collections.Counter(POS + NEG + FILL + THINGS + COLOURS + QA)
    vocab = nlp.vocab.BERTVocab(counter)
    with open(os.path.join(work, "vocab.json"), "w") as f:
        f.write(vocab.to_json())
    bert, _ = nlp.model.get_model("bert_12_768_12", dataset_name=None, vocab=vocab,
                                  pretrained=False, use_pooler=True, use_decoder=False,
                                  use_classifier=False, hparam_allow_override=True, **TINY)
    mx.random.seed(0)
    bert.initialize(mx.init.Normal(0.02))
    bert(mx.nd.ones((1, 4)), mx.nd.zeros((1, 4)), mx.nd.array([4]))
    bert.save_parameters(os.path.join(work, "tiny_bert.params"))


def prepare(work):
    """Everything the scripts read, in ``work``; returns the environment the runs get."""
    rng = random.Random(0)
    home = os.path.join(work, "mxnet_home")
    write_chnsenticorp(home, rng)
    write_squad(home, rng)
    write_pretraining_text(work, rng)
    offline = os.path.join(work, "offline")
    os.makedirs(offline, exist_ok=True)
    with open(os.path.join(offline, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE % (TINY,))
    make_model(work)
    return dict(os.environ, MXNET_HOME=home, TINY_BERT_VOCAB=os.path.join(work, "vocab.json"),
                PYTHONPATH=os.pathsep.join([ROOT, offline]))


def runs(only, repeats):
    """``(task, mode, runner flags, script flags)`` for each run, float32 first; a script that
    draws its own seed (``run_pretraining.py``) runs ``repeats`` times in each mode."""
    for task in only:
        _, _, float16_modes, unscale = SCRIPTS[task]
        for n in range(repeats if task in UNSEEDED else 1):
            tag = " #%d" % (n + 1) if task in UNSEEDED else ""
            yield task, "float32" + tag, [], FLOAT32.get(task, [])
            for flags in float16_modes:
                yield task, "float16" + tag, [], flags
                if unscale:
                    yield (task, "float16 --unscale-before-clip" + tag, ["--unscale-before-clip"],
                           flags)


def run_one(env, folder, script, runner_flags, script_args, limit):
    """Run ``script`` under ``mxmixed run`` in ``folder``; ``(exit code, stdout+stderr text)``."""
    os.makedirs(folder, exist_ok=True)
    command = [sys.executable, "-m", "mxmixed.run", *runner_flags, "--report", "report.json",
               script, *script_args]
    with open(os.path.join(folder, "output.txt"), "w") as out:
        proc = subprocess.Popen(command, cwd=folder, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            code = "hung (killed after %d s)" % limit
    with open(os.path.join(folder, "output.txt"), errors="replace") as f:
        return code, f.read()


def log_text(task, folder, output):
    """The text the script logged (its log file where it writes one, else its output)."""
    names = {"classifier": "log_ChnSentiCorp.txt", "squad": "output_dir/finetune_squad.log",
             "pretraining": "ckpt/phase1_log.0"}
    path = os.path.join(folder, names[task])
    if os.path.exists(path):
        with open(path, errors="replace") as f:
            return f.read()
    return output


def script_metrics(task, text):
    """The script's own numbers: training losses (first, last) and its dev metric(s)."""
    patterns = {"classifier": (r"\] loss=([0-9.]+)", r"validation metrics:accuracy:([0-9.]+)"),
                "squad": (r"Loss=([0-9.]+)", r"'f1': ([0-9.]+)"),
                "pretraining": (r"\]\tmlm_loss=\s*([0-9.]+)\tmlm_acc",
                                r"Eval mlm_loss=\S+\tmlm_acc=([0-9.]+)")}
    loss_re, dev_re = patterns[task]
    losses = [float(x) for x in re.findall(loss_re, text)]
    found = {"loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
             "dev": [float(x) for x in re.findall(dev_re, text)]}
    if task == "squad":
        found["exact_match"] = [float(x) for x in re.findall(r"'exact_match': ([0-9.]+)", text)]
    if task == "pretraining":
        found["eval_mlm_loss"] = [float(x) for x in re.findall(r"Eval mlm_loss=([0-9.]+)", text)]
    return found


def report_facts(folder):
    """What the runner's report says: status, steps, skipped, loss scale, scaled clipping."""
    path = os.path.join(folder, "report.json")
    if not os.path.exists(path):
        return {"report": "missing"}
    with open(path) as f:
        report = json.load(f)
    summary = report.get("summary") or {}
    return {"status": report.get("status"), "steps": summary.get("steps"),
            "skipped": summary.get("skipped"), "loss_scale_first": summary.get("loss_scale_first"),
            "loss_scale_last": summary.get("loss_scale_last"),
            "scaled_clipping": [{k: site.get(k) for k in ("site", "calls", "effective_max_norm",
                                                          "unscaled")}
                                for site in report.get("scaled_clipping") or []]}


def check(versions, only, work, limit, repeats):
    """Run every script of every version in every mode; a list of result rows."""
    env = prepare(work)
    rows = []
    for version, scripts in versions:
        for task, mode, runner_flags, flags in runs(only, repeats):
            script = os.path.join(scripts, SCRIPTS[task][0])
            args = [a.format(work=work) for a in SCRIPTS[task][1]] + flags
            folder = os.path.join(work, "runs", version, task, re.sub(r"[ #]+", "_", mode))
            print("== %s %s %s" % (version, task, mode), flush=True)
            code, output = run_one(env, folder, script, runner_flags, args, limit)
            row = {"version": version, "task": task, "mode": mode, "exit_code": code,
                   "worker_traceback": output.count("Traceback (most recent call last)"),
                   "mxmixed_lines": [ln for ln in output.splitlines() if ln.startswith("mxmixed run")],
                   **script_metrics(task, log_text(task, folder, output)), **report_facts(folder)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def table(rows):
    """A Markdown table of the rows."""
    lines = ["| version | script | run | exit | loss first -> last | dev | steps (skipped) | "
             "loss scale | scaled clipping | tracebacks |", "| --- " * 10 + "|"]
    for r in rows:
        dev = ", ".join("%.2f" % d for d in r.get("dev") or []) or "-"
        clip = "; ".join("%s x%d%s" % (os.path.basename(c["site"]), c["calls"],
                                       " (unscaled)" if c["unscaled"] else "")
                         for c in r.get("scaled_clipping") or []) or "-"
        scale = "-" if r.get("loss_scale_first") is None else "%g -> %g" % (
            r["loss_scale_first"], r["loss_scale_last"])
        lines.append("| %s | %s | %s | %s | %s -> %s | %s | %s (%s) | %s | %s | %d |" % (
            r["version"], SCRIPTS[r["task"]][0], r["mode"], r["exit_code"], r.get("loss_first"),
            r.get("loss_last"), dev, r.get("steps"), r.get("skipped"), scale, clip,
            r["worker_traceback"]))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scripts", action="append", required=True, metavar="NAME=DIR",
                        help="a GluonNLP scripts/bert folder, named (repeatable)")
    parser.add_argument("--only", nargs="+", choices=sorted(SCRIPTS), default=list(SCRIPTS))
    parser.add_argument("--work", help="folder for the data and the runs (default: a new "
                                       "temporary folder, kept)")
    parser.add_argument("--limit", type=int, default=1800, help="seconds a run may take")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per mode of a script that seeds itself at random")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    versions = []
    for item in args.scripts:
        name, _, folder = item.rpartition("=")
        if not os.path.isfile(os.path.join(folder, "finetune_classifier.py")):
            parser.error("%s is not GluonNLP's scripts/bert folder" % folder)
        versions.append((name or folder, os.path.abspath(folder)))
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="gluonnlp-scripts-"))
    rows = check(versions, args.only, work, args.limit, args.repeats)
    print(table(rows))
    print("runs and logs in %s" % work)
    if args.json:
        with io.open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if r["exit_code"] != 0 or r["worker_traceback"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
