"""A model folder made on this machine: a preset's seeded weights and a tokenizer trained here, no download.

Servers that load a model by path (`transformers serve DIR`, vLLM) need a
folder with a config, weights and a tokenizer. `save_local_model` writes the
same model every backend builds for the preset (`build_model`, same seed:
the same weights as `backend=real` and `backend=transformers`), a byte-level
BPE tokenizer trained on the packaged ShareGPT text (or given texts), padded with named tokens to the
model's vocabulary so every id it can generate has a text, and a
generation config with no EOS token, so a server generates exactly
`max_tokens` even where it cannot be told to ignore EOS. `model.path=DIR`
loads the folder back into our real backend; `workload.tokenizer=hf:DIR`
tokenizes a trace with its tokenizer, so a text prompt decodes and re-encodes
to the same ids.
"""
from __future__ import annotations

from collections.abc import Iterable
import itertools
from pathlib import Path

import torch

from pagedbench.engines.real.model import build_model
from pagedbench.engines.specs.model import ModelSpec

TOKENIZER_VOCAB = 8192       # BPE merges of a tokenizer trained on a few thousand conversations
TRAINING_TEXTS = 4000        # ShareGPT pairs the tokenizer is trained on


def sharegpt_texts(limit: int = TRAINING_TEXTS) -> list[str]:
    """Prompt and completion texts of the packaged ShareGPT file, in file order."""
    from pagedbench.workloads.sharegpt import read_sharegpt, with_sharegpt_file

    pairs, _ = with_sharegpt_file(None, read_sharegpt)
    return [text for pair in pairs[:limit] for text in pair]


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE `PreTrainedTokenizerFast` (every byte encodes, so no text is unknown) with
    <s>, </s> and <pad> tokens; it adds no BOS, so a prompt's ids are its text's alone."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def save_local_model(spec: ModelSpec, out: Path, seed: int = 0, texts: Iterable[str] | None = None,
                     vocab_size: int = TOKENIZER_VOCAB) -> Path:
    """Write `spec`'s seeded model (float32) and a trained tokenizer to `out`; the folder."""
    vocab_size = min(vocab_size, spec.vocab_size)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(spec, torch.device("cpu"), torch.float32, seed)
    gen = model.generation_config
    gen.eos_token_id, gen.bos_token_id, gen.pad_token_id = None, None, 0
    model.config.eos_token_id = model.config.bos_token_id = None
    model.config.pad_token_id = 0
    model.save_pretrained(out)
    texts = list(itertools.islice(texts, TRAINING_TEXTS * 2)) if texts is not None else sharegpt_texts()
    tokenizer = train_tokenizer(texts, vocab_size)
    # Every id the model can generate decodes to text (a server streams text): the ids past the trained
    # vocabulary are named tokens `<tN>`, which encode back to N.
    tokenizer.add_tokens([f"<t{i}>" for i in range(len(tokenizer), spec.vocab_size)])
    tokenizer.save_pretrained(out)
    return out
