"""The offline assets of a CPU torchtitan run: a seeded synthetic text corpus and a small
tokenizer built from it with the ``tokenizers`` package (the torchtitan wheel ships neither its
test tokenizer nor the c4_test data, and tests reach no network).

    python assets.py OUT_DIR SEED      # writes OUT_DIR/tokenizer/ and OUT_DIR/data/

``OUT_DIR/data`` is a directory of one JSON-lines file with a ``text`` field per line, which
torchtitan's ``c4_test`` dataset loader reads as a local Hugging Face dataset
(``--dataloader.dataset c4_test --dataloader.dataset_path OUT_DIR/data``); ``OUT_DIR/tokenizer``
holds ``tokenizer.json`` and ``tokenizer_config.json`` for ``--hf_assets_path``. Both depend
on SEED only: the same seed gives byte-identical files.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

BOS, EOS, UNK = "<|begin_of_text|>", "<|end_of_text|>", "<unk>"
# Below the llama3 debugmodel's vocabulary of 2048 token ids.
VOCAB_WORDS = 1500
DOCUMENTS = 400


def _words(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < VOCAB_WORDS:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(2, 7))))
    return sorted(words)


def corpus(seed: int) -> list[str]:
    """DOCUMENTS documents of 16 to 160 words, drawn Zipf-like from a seeded word list, with a
    little structure (a word often follows the one before it), so that the loss falls."""
    rng = random.Random(seed)
    words = _words(rng)
    weights = [1.0 / (i + 1) for i in range(len(words))]
    follow = {w: rng.choice(words[:200]) for w in words}
    docs = []
    for _ in range(DOCUMENTS):
        n = rng.randint(16, 160)
        out = [rng.choices(words, weights)[0]]
        while len(out) < n:
            out.append(follow[out[-1]] if rng.random() < 0.5 else rng.choices(words, weights)[0])
        docs.append(" ".join(out))
    return docs


def build(out_dir: Path, seed: int) -> dict[str, str]:
    """Writes the corpus and the tokenizer under ``out_dir``; returns their paths."""
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders  # noqa: PLC0415

    docs = corpus(seed)
    data = out_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    with open(data / "train.jsonl", "w") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}) + "\n")

    # A word-level vocabulary, ids by first appearance in the corpus: deterministic, no trainer.
    vocab = {BOS: 0, EOS: 1, UNK: 2}
    for doc in docs:
        for word in doc.split():
            vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tdir = out_dir / "tokenizer"
    tdir.mkdir(parents=True, exist_ok=True)
    tok.save(str(tdir / "tokenizer.json"))
    (tdir / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": BOS, "eos_token": EOS, "unk_token": UNK,
        "add_bos_token": True, "add_eos_token": True,
    }, indent=1, sort_keys=True) + "\n")
    return {"data": str(data), "tokenizer": str(tdir), "vocab_size": str(len(vocab))}


if __name__ == "__main__":
    print(json.dumps(build(Path(sys.argv[1]), int(sys.argv[2]))))
