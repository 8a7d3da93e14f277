"""Test-only: a tiny random-weight Wan2.1 VACE pipeline from the real classes, in a models folder.

The components are the classes the published ``Wan-AI/Wan2.1-VACE-1.3B-diffusers`` uses
(``WanVACETransformer3DModel``, ``AutoencoderKLWan``, ``UMT5EncoderModel``, a
``T5TokenizerFast``, ``UniPCMultistepScheduler`` with flow sigmas), built from tiny
configs with fixed seeds, saved with ``safe_serialization`` and put into a Hugging Face
cache layout (``models--Wan-AI--Wan2.1-VACE-1.3B-diffusers/snapshots/<commit>/``,
``refs/main``). The tokenizer is a tiny Unigram model built here (no download).
"""
from __future__ import annotations

import shutil
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"
#: tokens the tiny tokenizer's ``model_max_length`` allows (a longer prompt is truncated)
MAX_TOKENS = 64


def tiny_tokenizer():
    """A ``T5TokenizerFast`` over a tiny Unigram vocabulary (letters, digits, a few words)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import T5TokenizerFast

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(c, -2.0 - i * 0.01) for i, c in enumerate("▁abcdefghijklmnopqrstuvwxyz0123456789.,")]
    vocab += [(w, -1.0) for w in ("▁fog", "▁sea", "▁night", "▁harbour", "▁watercolour")]
    tk = Tokenizer(models.Unigram(vocab, unk_id=2, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    tk.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return T5TokenizerFast(tokenizer_object=tk, eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                           extra_ids=0, model_max_length=MAX_TOKENS)


def build_pipeline(folder: Path, seed: int = 0) -> Path:
    """Save a tiny ``WanVACEPipeline`` (diffusers layout, safetensors) into ``folder``."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanVACEPipeline, WanVACETransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)
    tok = tiny_tokenizer()
    text = UMT5EncoderModel(UMT5Config(vocab_size=len(tok.get_vocab()), d_model=16, d_kv=4, d_ff=32, num_layers=1,
                                       num_heads=4, relative_attention_num_buckets=8,
                                       relative_attention_max_distance=16))
    vae = AutoencoderKLWan(base_dim=4, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    transformer = WanVACETransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=16, out_channels=16,
        text_dim=16, freq_dim=16, ffn_dim=16, num_layers=2, rope_max_seq_len=32, vace_layers=[0],
        vace_in_channels=96)
    sched = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    pipe = WanVACEPipeline(tokenizer=tok, text_encoder=text, vae=vae, scheduler=sched, transformer=transformer)
    pipe.save_pretrained(folder, safe_serialization=True)
    assert list((Path(folder) / "transformer").glob("*.safetensors"))
    return Path(folder)


def install_in_cache(cache: Path, repo_id: str, pipeline_dir: Path, commit: str = COMMIT) -> Path:
    """Copy a saved pipeline into the Hugging Face cache ``cache`` as ``repo_id`` at
    ``commit`` (``refs/main`` pointing at it). Returns the snapshot folder."""
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    if snap.exists():
        shutil.rmtree(snap)
    shutil.copytree(pipeline_dir, snap)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap
