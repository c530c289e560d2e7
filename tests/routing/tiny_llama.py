"""Write a tiny random-weight Llama (and a tokenizer trained here) for the vLLM engine tests.

Run with the vLLM virtualenv's Python, so the files match the transformers vLLM loads them with::

    /opt/fleetgate-vllm/bin/python tests/routing/tiny_llama.py /tmp/fleetgate-tiny-llama

Nothing is downloaded: the tokenizer is a word-level one trained with ``tokenizers`` on a small
generated corpus; the weights are random (seeded). Idempotent: an existing model is kept.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

WORDS = (
    "account billing invoice roaming network plan device contract upgrade refund payment "
    "balance coverage signal router modem fiber outage ticket agent policy discount family "
    "prepaid postpaid international data voice message limit charge credit order shipping "
    "you are the assistant of customer user asks question answer please help with my"
).split()


def build(out: Path) -> None:
    """Write the model to ``out`` unless it is there: into a folder of this process first, then
    renamed into place, so processes building at once (test workers side by side) never read
    or leave a half-written model."""
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(f"{out.name}.part-{os.getpid()}")
    shutil.rmtree(part, ignore_errors=True)
    _write(part)
    try:
        part.rename(out)
    except OSError:  # another process put its copy in place first (or a stale empty folder)
        shutil.rmtree(part, ignore_errors=True)
        if not (out / "config.json").exists():
            raise


def _write(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True)
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(50)) for i in range(200)]
    corpus += [str(i) for i in range(1000)] + list(".,:;?!-'\"()")
    trainer = trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"], vocab_size=2000)
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    )
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=True, torch_dtype="float32",
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
    print(sys.argv[1])
