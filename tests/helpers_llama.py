"""A tiny transformers Llama decoding against a static cache, for the compile tests that run a
real model (they skip where transformers is not installed)."""

import pytest
import torch


def tiny_llama(heads: int, kv_heads: int, hidden: int, batch: int, cache_len: int):
    """(model, logits, layers): a LlamaForCausalLM of random weights (seed 0; SDPA attention,
    `heads` query heads over `kv_heads` K/V heads, two layers), and `logits(run)`: for `run`
    (the model, or it compiled), the prompt's last logits (five positions of `batch` rows
    against a fresh StaticCache of `cache_len`), then the next decode step's."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=hidden, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=heads, num_key_value_heads=kv_heads,
                                      max_position_embeddings=max(64, cache_len), attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 64, (batch, 5))

    def logits(run):
        cache = transformers.StaticCache(config=config, max_cache_len=cache_len)
        with torch.no_grad():
            first = run(input_ids=prompt, past_key_values=cache, cache_position=torch.arange(5)).logits[:, -1]
            return first, run(input_ids=prompt[:, -1:], past_key_values=cache, cache_position=torch.tensor([5])).logits

    return model, logits, config.num_hidden_layers
