"""The text_prompted backend's model loader (CLIPSeg via transformers, an optional extra)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from carryon_common.core.errors import ConfigError
from carryon_shield.core.text_segmenter import ClipSegSegmenter

HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
# Set by `scripts/test_extra.sh text`: there a missing extra is a failure, not a skip.
REQUIRE = os.environ.get("CARRYON_REQUIRE_TEXT_MODEL") == "1"


def test_a_missing_model_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="text_model_dir"):
        ClipSegSegmenter(str(tmp_path / "missing"))


@pytest.mark.skipif(HAS_TRANSFORMERS, reason="transformers is installed here")
def test_without_the_extra_the_error_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="optional extra"):
        ClipSegSegmenter(str(tmp_path))


@pytest.mark.skipif(
    not (HAS_TRANSFORMERS or REQUIRE),
    reason="text_prompted extra (transformers + torch) not installed in this virtualenv; "
    "run scripts/test_extra.sh text",
)
def test_tiny_random_clipseg_segments_every_prompt(tmp_path: Path) -> None:  # pragma: no cover - extra only
    import numpy as np
    from transformers import (
        CLIPSegConfig,
        CLIPSegForImageSegmentation,
        CLIPSegProcessor,
        CLIPTokenizerFast,
        ViTImageProcessor,
    )

    vocab = {t: i for i, t in enumerate(["<|startoftext|>", "<|endoftext|>", "robot</w>", "carrot</w>", "arm</w>"])}
    (tmp_path / "vocab.json").write_text(__import__("json").dumps(vocab))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizerFast(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    processor = CLIPSegProcessor(ViTImageProcessor(size={"height": 32, "width": 32}, crop_size=32), tokenizer)
    config = CLIPSegConfig(
        text_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
                     "vocab_size": len(vocab), "max_position_embeddings": 16},
        vision_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
                       "image_size": 32, "patch_size": 16},
        projection_dim=8, reduce_dim=8, extract_layers=[0],
    )  # fmt: skip
    CLIPSegForImageSegmentation(config).save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    segmenter = ClipSegSegmenter(str(tmp_path / "model"), threshold=0.5)
    rgb = np.zeros((48, 64, 3), dtype=np.uint8)
    masks = segmenter.segment(rgb, ["carrot", "robot arm"])
    assert set(masks) == {"carrot", "robot arm"}
    assert all(m.shape == (48, 64) and m.dtype == bool for m in masks.values())
