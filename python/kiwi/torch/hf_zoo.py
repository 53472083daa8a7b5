"""Small HuggingFace models built from their configs with random weights (offline: no hub download),
each with an example batch and its labels, for tests and benches of the generic capture."""
from typing import Any, Callable, Dict, Tuple

import torch

SEQ, BATCH, VOCAB, IMAGE = 128, 4, 256, 64


def _text(model: torch.nn.Module, vocab: int = VOCAB) -> Tuple[torch.nn.Module, Dict[str, Any]]:
    ids = torch.randint(0, vocab, (BATCH, SEQ))
    return model, {"input_ids": ids, "labels": ids}


def _image(model: torch.nn.Module, classes: int = 10, size: int = IMAGE) -> Tuple[torch.nn.Module, Dict[str, Any]]:
    return model, {"pixel_values": torch.randn(BATCH, 3, size, size), "labels": torch.randint(0, classes, (BATCH,))}


def _builders() -> Dict[str, Callable[[], Tuple[torch.nn.Module, Dict[str, Any]]]]:
    import transformers as tf
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                 vocab_size=VOCAB, max_position_embeddings=2 * SEQ)
    return {
        "gpt2": lambda: _text(tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                                                n_positions=2 * SEQ))),
        "llama": lambda: _text(tf.LlamaForCausalLM(tf.LlamaConfig(**small, num_key_value_heads=2))),
        "mistral": lambda: _text(tf.MistralForCausalLM(tf.MistralConfig(**small, num_key_value_heads=2))),
        "qwen2": lambda: _text(tf.Qwen2ForCausalLM(tf.Qwen2Config(**small, num_key_value_heads=2))),
        "mixtral": lambda: _text(tf.MixtralForCausalLM(tf.MixtralConfig(**small, num_key_value_heads=2,
                                                                        num_local_experts=4, num_experts_per_tok=2,
                                                                        # the default grouped_mm has no meta kernel
                                                                        # for float32 on this torch (bf16 only)
                                                                        experts_implementation="batched_mm"))),
        "bert": lambda: _text(tf.BertForMaskedLM(tf.BertConfig(**small))),
        "t5": lambda: _t5(tf),
        "vit": lambda: _image(tf.ViTForImageClassification(tf.ViTConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=IMAGE,
            patch_size=8, num_labels=10))),
        "swin": lambda: _image(tf.SwinForImageClassification(tf.SwinConfig(
            image_size=IMAGE, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4,
            num_labels=10))),
        "convnext": lambda: _image(tf.ConvNextForImageClassification(tf.ConvNextConfig(
            num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10, image_size=IMAGE))),
        "resnet": lambda: _image(tf.ResNetForImageClassification(tf.ResNetConfig(
            embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck", num_labels=10))),
        "mobilenet_v2": lambda: _image(tf.MobileNetV2ForImageClassification(tf.MobileNetV2Config(
            depth_multiplier=0.35, image_size=IMAGE, num_labels=10))),
    }


def _t5(tf) -> Tuple[torch.nn.Module, Dict[str, Any]]:
    config = tf.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                         decoder_start_token_id=0, pad_token_id=0)
    ids = torch.randint(1, VOCAB, (BATCH, SEQ))
    return tf.T5ForConditionalGeneration(config), {"input_ids": ids, "labels": ids}


def names() -> Tuple[str, ...]:
    return tuple(_builders())


def build(name: str, seed: int = 0) -> Tuple[torch.nn.Module, Dict[str, Any]]:
    """(model in training mode, keyword inputs with labels) for one of names()."""
    builders = _builders()
    if name not in builders:
        raise KeyError(f"model '{name}' is not one of {', '.join(builders)}")
    torch.manual_seed(seed)
    model, inputs = builders[name]()
    return model.train(), inputs
