"""GluonNLP 0.10.x's scripts with no float16 switch, unmodified, under ``mxmixed run``: float32
beside ``--amp float16`` (and ``--amp bfloat16``).

The scripts (``scripts/language_model/word_language_model.py``, the AWD-LSTM;
``large_word_language_model.py``, the BigRNN with sampled softmax and sparse weights, the
"bigLSTM"; ``scripts/machine_translation/train_transformer.py``) are outside clients: they are
never copied into this repository. A person fetches them and names the folder::

    git clone https://github.com/dmlc/gluon-nlp /tmp/gluon-nlp
    mkdir -p /tmp/gnlp
    git -C /tmp/gluon-nlp archive origin/v0.10.x scripts/language_model \\
        scripts/machine_translation | tar -x -C /tmp/gnlp
    python benchmarks/gluonnlp_lm_scripts.py --scripts /tmp/gnlp/scripts

Everything else is made offline in a temporary folder that serves as ``MXNET_HOME`` (nothing
is downloaded; the scripts' loaders would download the data sets, each checked by SHA-1):

* WikiText-2 (``wiki.train.tokens``, ``wiki.valid.tokens``, ``wiki.test.tokens``), the Google
  Billion Word stream (``training-monolingual.tokenized.shuffled/news.en-000NN-of-00100``,
  ``heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050`` and the vocabulary
  ``gbw-ebb1a287.vocab``) and GluonNLP's ``TOY`` translation set (``train.en``, ``train.de``,
  ``vocab.en.json``, ``vocab.de.json``), in their real formats, of sentences from a small
  grammar ("the red car is next to the old house .") and, for the translation, a word-for-word
  "German" of them;
* a ``sitecustomize.py`` on ``PYTHONPATH`` that lets GluonNLP's loaders read those files
  without their SHA-1 (the scripts themselves run as GluonNLP ships them);
* where ``six`` or ``sacremoses`` is not installed (no dependencies of this project; the
  translation script's ``bleu.py`` imports six, and it builds GluonNLP's
  ``SacreMosesDetokenizer``, used only for ``--bleu 13a/intl``), a module beside it with the
  names used: six's ``unichr`` and ``string_types``, a ``MosesDetokenizer`` that joins tokens.

The scripts are copied into the temporary folder and run from there (the translation script
caches its processed data beside itself), unmodified. Each script runs through ``python -m
mxmixed run --report R`` as float32 (the script as it is) and with ``--amp float16`` (dynamic
loss scaling), the big LM also with ``--amp float16 --loss-scale 1`` (no scaling), the
Transformer also with ``--amp bfloat16`` (where MXNet can run bfloat16: it fails with the
runner's one line elsewhere), at small sizes, each run bounded by ``--limit`` seconds. The table
gives the script's own logged training loss (first and last), its validation loss where it logs
one, the share of float32's loss drop each run recovers, the runner's report (steps, skipped
steps, loss scale, clipping call sites and whether they were unscaled first), the exit code and
the wall time. ``--json PATH`` writes it all. It says nothing about speed (the emulation is for
numerics).

Usage: ``python benchmarks/gluonnlp_lm_scripts.py --scripts DIR [--only word big transformer]
[--work DIR] [--limit S] [--json PATH]``
"""
import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

THINGS = ["car", "house", "door", "hat", "boat", "kite", "cup", "chair", "shirt", "bird", "ball",
          "box", "tree", "dog", "cat", "lamp"]
COLOURS = ["red", "blue", "green", "yellow", "black", "white", "pink", "grey"]
SIZES = ["old", "new", "small", "big"]
PLACES = ["next to", "behind", "under", "near"]

SITECUSTOMIZE = '''"""Offline stand-ins for what GluonNLP 0.10's language-model and translation scripts
download: with GLUONNLP_STANDIN set, the loaders read the files they find without their SHA-1.
The scripts are not modified."""
import os

if os.environ.get("GLUONNLP_STANDIN"):
    import gluonnlp.data.corpora.google_billion_word as _gbw
    import gluonnlp.data.corpora.wikitext as _wikitext
    import gluonnlp.data.translation as _translation

    for _module in (_gbw, _wikitext, _translation):
        _module.check_sha1 = lambda *args, **kwargs: True
    _gbw.GBWStream._get_data = lambda self: None
'''

STAND_INS = {
    "six": '''"""The names of six that GluonNLP's scripts/machine_translation/bleu.py uses."""
unichr = chr
string_types = (str,)
''',
    "sacremoses": '''"""A stand-in for sacremoses: train_transformer.py builds GluonNLP's
SacreMosesDetokenizer at import; it detokenizes only for --bleu 13a/intl."""


class MosesDetokenizer:
    def detokenize(self, tokens, return_str=True, unescape=True):
        return " ".join(tokens) if return_str else list(tokens)
'''}

# name: (script under --scripts, float32 arguments, float16 flag sets, how its loss is logged)
SCRIPTS = {
    "word": ("language_model/word_language_model.py", [
        "--emsize", "32", "--nhid", "64", "--nlayers", "2", "--bptt", "20", "--batch_size", "16",
        "--epochs", "5", "--log-interval", "10", "--lr", "10", "--dropout", "0", "--dropout_h",
        "0", "--dropout_i", "0", "--dropout_e", "0", "--weight_dropout", "0", "--alpha", "0",
        "--beta", "0", "--save", "{out}/model.params"],
        [["--amp", "float16"]]),
    "big": ("language_model/large_word_language_model.py", [
        "--emsize", "32", "--nhid", "64", "--nproj", "32", "--nlayers", "1", "--k", "32",
        "--batch-size", "16", "--bptt", "10", "--epochs", "3", "--log-interval", "10",
        "--lr", "0.2", "--save", "{out}/model.params"],
        [["--amp", "float16", "--loss-scale", "1"], ["--amp", "float16"]]),
    # --scaled as in GluonNLP's own commands (scripts/machine_translation/index.rst): without
    # it the attention logits are not divided by sqrt(units / heads) and bfloat16's rounding
    # reaches the gradients 4x amplified (docs/bfloat16.md)
    "transformer": ("machine_translation/train_transformer.py", [
        "--dataset", "TOY", "--num_units", "32", "--hidden_size", "64", "--num_layers", "2",
        "--num_heads", "2", "--scaled", "--epochs", "3", "--batch_size", "256",
        "--test_batch_size", "256", "--beam_size", "2", "--num_buckets", "4", "--lr", "2.0",
        "--warmup_steps", "40", "--log_interval", "5", "--save_dir", "{out}/transformer_out"],
        [["--amp", "float16"], ["--amp", "bfloat16"]]),
}
TRAIN_LOSS = {"word": r"\] current loss ([0-9.]+)", "big": r"\] loss ([0-9.]+)",
              "transformer": r"\] loss=([0-9.]+)"}
VALID_LOSS = {"word": r"valid loss ([0-9.]+)", "transformer": r"valid Loss=([0-9.]+)"}


def sentence(rng):
    """One sentence of the grammar: things with a size and a colour, where they stand."""
    def thing():
        return "the %s %s %s" % (rng.choice(SIZES), rng.choice(COLOURS), rng.choice(THINGS))
    if rng.random() < 0.5:
        return "%s is %s %s ." % (thing(), rng.choice(PLACES), thing())
    return "%s is %s ." % (thing(), rng.choice(COLOURS))


def words():
    """Every word of the grammar."""
    found = set(THINGS + COLOURS + SIZES + ["the", "is", "."])
    for place in PLACES:
        found.update(place.split())
    return sorted(found)


GERMAN = {word: "%s_de" % word for word in words()}


def write_wikitext(home, rng):
    folder = os.path.join(home, "datasets", "wikitext-2")
    os.makedirs(folder, exist_ok=True)
    for name, lines in (("wiki.train.tokens", 1200), ("wiki.valid.tokens", 60),
                        ("wiki.test.tokens", 30)):
        with open(os.path.join(folder, name), "w") as f:
            f.write(" = Things = \n")
            f.writelines(" %s \n" % sentence(rng) for _ in range(lines))


def write_gbw(home, rng):
    """The GBW stream's training shards, its held-out shard and its vocabulary (JSON)."""
    import gluonnlp as nlp  # only here: the runs load their own stack

    base = os.path.join(home, "datasets", "gbw",
                        "1-billion-word-language-modeling-benchmark-r13output")
    train = os.path.join(base, "training-monolingual.tokenized.shuffled")
    heldout = os.path.join(base, "heldout-monolingual.tokenized.shuffled")
    os.makedirs(train, exist_ok=True)
    os.makedirs(heldout, exist_ok=True)
    counter = nlp.data.Counter()
    for n in range(1, 5):
        lines = [sentence(rng) for _ in range(400)]
        counter.update(w for line in lines for w in line.split())
        with open(os.path.join(train, "news.en-%05d-of-00100" % n), "w") as f:
            f.writelines(line + "\n" for line in lines)
    with open(os.path.join(heldout, "news.en.heldout-00000-of-00050"), "w") as f:
        f.writelines(sentence(rng) + "\n" for _ in range(100))
    counter["<eos>"] = 1600
    vocab = nlp.Vocab(counter, bos_token=None)
    with open(os.path.join(home, "datasets", "gbw", "gbw-ebb1a287.vocab"), "w") as f:
        f.write(vocab.to_json())


def write_toy_translation(home, rng):
    """GluonNLP's TOY set (its val and test segments read train.*): English sentences of the
    grammar and their word-for-word "German"."""
    import gluonnlp as nlp

    folder = os.path.join(home, "datasets", "translation_test")
    os.makedirs(folder, exist_ok=True)
    english = [sentence(rng) for _ in range(240)]
    german = [" ".join(GERMAN[w] for w in line.split()) for line in english]
    for lang, lines in (("en", english), ("de", german)):
        with open(os.path.join(folder, "train." + lang), "w") as f:
            f.writelines(line + "\n" for line in lines)
        counter = nlp.data.Counter(w for line in lines for w in line.split())
        with open(os.path.join(folder, "vocab.%s.json" % lang), "w") as f:
            f.write(nlp.Vocab(counter).to_json())


def prepare(work):
    rng = random.Random(7)
    home = os.path.join(work, "mxnet_home")
    write_wikitext(home, rng)
    write_gbw(home, rng)
    write_toy_translation(home, rng)
    with open(os.path.join(work, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    for name, text in STAND_INS.items():
        if importlib.util.find_spec(name) is None:
            with open(os.path.join(work, name + ".py"), "w") as f:
                f.write(text)
    return home


def _numbers(pattern, text):
    return [float(x) for x in re.findall(pattern, text)] if pattern else []


def run_one(name, flags, scripts, work, home, limit):
    script, args, _ = SCRIPTS[name]
    tag = "-".join([name] + [f.lstrip("-") for f in flags]) or name
    out = os.path.join(work, tag)
    os.makedirs(out, exist_ok=True)
    report = os.path.join(out, "r.json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([work, ROOT]), MXNET_HOME=home,
               GLUONNLP_STANDIN="1", MXNET_STORAGE_FALLBACK_LOG_VERBOSE="0")
    cmd = [sys.executable, "-m", "mxmixed.run", "--report", report] + flags \
        + [os.path.join(scripts, script)] + [a.format(out=out) for a in args]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=out, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=limit)
        code, text = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as err:
        code, text = "timeout", err.stdout or ""
        text = text if isinstance(text, str) else text.decode("utf-8", "replace")
    wall = time.perf_counter() - start
    with open(os.path.join(out, "output.txt"), "w") as f:
        f.write(text)
    data = json.load(open(report)) if os.path.exists(report) else {}
    summary = data.get("summary") or {}
    train = _numbers(TRAIN_LOSS[name], text)
    return {"name": name, "flags": flags, "exit_code": code, "wall_s": round(wall, 1),
            "train_loss_first": train[0] if train else None,
            "train_loss_last": train[-1] if train else None,
            "valid_loss": (_numbers(VALID_LOSS.get(name), text) or [None])[-1],
            "trained_in": data.get("trained_in"), "status": data.get("status"),
            "steps": summary.get("steps"), "skipped": summary.get("skipped"),
            "loss_scale": [summary.get("loss_scale_first"), summary.get("loss_scale_last"),
                           summary.get("loss_scale_min")],
            "clipping": [{"function": s["function"], "calls": s["calls"],
                          "max_norm": s["max_norm"], "unscaled": s["unscaled"]}
                         for s in data.get("scaled_clipping") or []],
            "trainers": (data.get("amp_float16") or {}).get("trainers"),
            "traceback": "Traceback (most recent call last)" in text,
            "closing": [line for line in text.splitlines()
                        if line.startswith("mxmixed run:")][-1:]}


def _drop(row):
    if row["train_loss_first"] is None or row["train_loss_last"] is None:
        return None
    return row["train_loss_first"] - row["train_loss_last"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scripts", required=True,
                        help="GluonNLP's scripts/ folder (language_model, machine_translation)")
    parser.add_argument("--only", nargs="+", choices=sorted(SCRIPTS), default=sorted(SCRIPTS))
    parser.add_argument("--work", default=None)
    parser.add_argument("--limit", type=float, default=900)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="gnlp-lm-"))
    home = prepare(work)
    # the translation scripts cache the processed data beside themselves (cached/TOY_*.npz):
    # a copy in the work folder keeps that cache this run's, and the given folder untouched
    scripts = os.path.join(work, "scripts")
    for folder in {os.path.dirname(SCRIPTS[name][0]) for name in args.only}:
        shutil.copytree(os.path.join(args.scripts, folder), os.path.join(scripts, folder),
                        dirs_exist_ok=True, ignore=shutil.ignore_patterns("cached"))
    rows = []
    for name in args.only:
        base = run_one(name, [], scripts, work, home, args.limit)
        rows.append(base)
        for flags in SCRIPTS[name][2]:
            row = run_one(name, flags, scripts, work, home, args.limit)
            drop, base_drop = _drop(row), _drop(base)
            row["share_of_float32_drop"] = (round(drop / base_drop, 3)
                                            if drop is not None and base_drop else None)
            rows.append(row)
    print("%-12s %-28s %5s %7s %7s %7s %6s %5s %5s %-22s %s" % (
        "script", "mode", "exit", "loss0", "loss1", "valid", "share", "steps", "skip",
        "scale first/last/min", "clipping (calls, unscaled)"))
    for row in rows:
        scale = "/".join("-" if s is None else "%g" % s for s in row["loss_scale"])
        clipping = ", ".join("%s %d %s" % (c["function"], c["calls"], c["unscaled"])
                             for c in row["clipping"]) or "-"
        print("%-12s %-28s %5s %7s %7s %7s %6s %5s %5s %-22s %s" % (
            row["name"], " ".join(row["flags"]) or "float32", row["exit_code"],
            row["train_loss_first"], row["train_loss_last"], row["valid_loss"],
            row.get("share_of_float32_drop", "-"), row["steps"], row["skipped"], scale,
            clipping))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"work": work, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
