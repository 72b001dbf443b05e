"""kernelgen.text: tokenizers for language models, in pure Python (they run in Pyodide too).

    tok = kg.text.Tokenizer.from_file("tokenizer.json")   # a Hugging Face tokenizer file (BPE)
    ids = tok.encode("print('hi')"); tok.decode(ids)
    tok = kg.text.train_bpe(texts, vocab_size=4096)       # our own byte-level BPE trainer
"""
from ..errors import TokenizerError
from .tokenizer import DecodeStream, Tokenizer
from .train import train_bpe

__all__ = ["Tokenizer", "DecodeStream", "TokenizerError", "train_bpe"]
