"""`text_prompted` grounding backend: CLIPSeg (transformers) from a local folder.

Optional extra: needs `transformers` and `torch`, which the main virtualenv does not
carry (see docs/shield.md). Nothing is downloaded: the model loads from `model_dir`
only (`local_files_only=True`).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from carryon_common.core.errors import ConfigError


class ClipSegSegmenter:
    """Segmenter (carryon_shield.core.grounding.Segmenter) over a local CLIPSeg model:
    one mask per prompt where the sigmoid of its logits exceeds `threshold`, resized to
    the image."""

    def __init__(self, model_dir: str, threshold: float = 0.5) -> None:
        if not model_dir or not Path(model_dir).is_dir():
            raise ConfigError(
                f"text_prompted grounding needs text_model_dir: a local CLIPSeg model folder (got {model_dir!r})"
            )
        try:
            # Imported by name: the optional extra is absent where mypy checks the core.
            torch = importlib.import_module("torch")
            transformers = importlib.import_module("transformers")
        except ImportError as exc:
            raise ConfigError(
                f"text_prompted grounding needs the optional extra (transformers + torch): {exc}"
            ) from None
        self._torch: Any = torch
        self.processor: Any = transformers.CLIPSegProcessor.from_pretrained(model_dir, local_files_only=True)
        self.model: Any = transformers.CLIPSegForImageSegmentation.from_pretrained(
            model_dir, local_files_only=True
        ).eval()
        self.threshold = threshold

    def segment(self, rgb: npt.NDArray[np.uint8], prompts: Sequence[str]) -> dict[str, npt.NDArray[np.bool_]]:
        if not prompts:
            return {}
        torch = self._torch
        inputs = self.processor(text=list(prompts), images=[rgb] * len(prompts), padding=True, return_tensors="pt")
        with torch.no_grad():
            logits = self.model(**inputs).logits
        if logits.ndim == 2:
            logits = logits[None]
        probability = torch.sigmoid(logits)[:, None]
        resized = torch.nn.functional.interpolate(probability, size=rgb.shape[:2], mode="bilinear", align_corners=False)
        masks = (resized[:, 0] > self.threshold).numpy()
        return {prompt: masks[i] for i, prompt in enumerate(prompts)}
