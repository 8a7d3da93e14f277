"""Tiny random-weight FLUX.2 [klein] replica for tests, built offline from the real classes.

:func:`build_tiny_flux2_klein` saves a :class:`diffusers.Flux2KleinPipeline` made of the
classes ``black-forest-labs/FLUX.2-klein-4B`` uses (``Flux2Transformer2DModel``,
``AutoencoderKLFlux2``, ``Qwen3ForCausalLM``, ``Qwen2TokenizerFast``,
``FlowMatchEulerDiscreteScheduler``), with tiny configs and random weights, as safetensors
in the Hugging Face cache layout (``models--black-forest-labs--FLUX.2-klein-4B/snapshots/
<rev>/``) of a models folder, so the renderer loads it exactly as it would the real model.

What differs from the real model, and why: widths and depths are tiny (the VAE keeps
4 blocks, so the pixel multiple is the real 16; the Qwen3 encoder keeps 27 layers, so the
pipeline's hidden-state layers (9, 18, 27) exist); the tokenizer is a byte-level BPE over
the 256 byte symbols and a few merges, with Qwen's special tokens and a chat template that
writes the same markup as Qwen3's (``<|im_start|>user ... <|im_end|>``, empty ``<think>``).
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenizer_util import bytes_to_unicode

REPO_ID = "black-forest-labs/FLUX.2-klein-4B"
REVISION = "0000000000000000000000000000000000000001"
#: Qwen3's chat markup for one user message with thinking disabled (what the pipeline asks for)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]


def tiny_tokenizer():
    """A ``Qwen2TokenizerFast`` over a byte-level BPE (the byte alphabet, a few merges for
    'photo', 'fog', 'the'), Qwen's special tokens (pad = ``<|endoftext|>``) and
    :data:`CHAT_TEMPLATE`; built in memory with the ``tokenizers`` library."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import Qwen2TokenizerFast

    vocab = {}
    for c in sorted(set(bytes_to_unicode().values())):
        vocab[c] = len(vocab)
    merges = [("p", "h"), ("ph", "o"), ("pho", "t"), ("phot", "o"), ("f", "o"), ("fo", "g"),
              ("t", "h"), ("th", "e")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    bpe = models.BPE(vocab=vocab, merges=merges)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    return Qwen2TokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                              unk_token=None, bos_token=None, chat_template=CHAT_TEMPLATE,
                              model_max_length=131072)


def build_tiny_flux2_klein(models_dir, *, repo_id: str = REPO_ID, seed: int = 0) -> Path:
    """Save the tiny replica into ``models_dir`` in the HF cache layout; returns the snapshot folder."""
    import torch
    from diffusers import (AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline,
                           Flux2Transformer2DModel)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer()
    text_hidden = 16
    text = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=text_hidden, intermediate_size=32, num_hidden_layers=27,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=1024,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id))
    vae = AutoencoderKLFlux2(
        block_out_channels=(8, 8, 8, 8), layers_per_block=1, latent_channels=4, norm_num_groups=4,
        sample_size=64)
    transformer = Flux2Transformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=3 * text_hidden, timestep_guidance_channels=32,
        axes_dims_rope=(4, 4, 4, 4), guidance_embeds=False)
    sched = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True,
                                            base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
                                            max_image_seq_len=4096, time_shift_type="exponential")
    # the VAE's latent batch-norm statistics are buffers; give them non-trivial values
    with torch.no_grad():
        vae.bn.running_mean.normal_(0.0, 0.1)
        vae.bn.running_var.uniform_(0.5, 1.5)
    pipe = Flux2KleinPipeline(scheduler=sched, vae=vae, text_encoder=text, tokenizer=tokenizer,
                              transformer=transformer, is_distilled=True)
    root = Path(models_dir) / ("models--" + repo_id.replace("/", "--"))
    snap = root / "snapshots" / REVISION
    pipe.save_pretrained(snap, safe_serialization=True)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(REVISION)
    assert list((snap / "transformer").glob("*.safetensors"))
    assert json.loads((snap / "model_index.json").read_text())["_class_name"] == "Flux2KleinPipeline"
    return snap
