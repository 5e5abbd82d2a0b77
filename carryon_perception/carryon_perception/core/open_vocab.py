"""The `open_vocab` backend's image model: text-prompted boxes from an OWLv2 detector,
masks from a SAM-family segmenter given those boxes (Hugging Face transformers).

Optional extra: `transformers` and `torch` are not in the main virtualenv (docs/perception.md,
requirements/text.txt). They are imported when a model is loaded, never when this module
is. Nothing is downloaded: both models load from local folders only
(`local_files_only=True`), in the `save_pretrained` layout (weights, config, processor).

The rest of the pipeline is the tabletop backend's (points, self-filter, planes, fusion,
tracks): its `Recogniser` hook turns each named mask into a labelled segment, and what the
detector does not name is segmented by depth and colour and stays `unknown_<n>`.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from carryon_common.core.clouds import CameraView
from carryon_common.core.errors import ConfigError
from carryon_perception.core.regions import NamedMask
from carryon_perception.core.segment import Segment
from carryon_perception.core.types import ROBOT_LABEL, TABLE_LABEL, UNKNOWN_PREFIX

DETECTOR_KEY = "open_vocab_detector_dir"
SEGMENTER_KEY = "open_vocab_segmenter_dir"
_RESERVED = (ROBOT_LABEL, TABLE_LABEL)


class Unnamed:
    """The labeller of what the detector left: every segment stays unidentified."""

    def label_segments(
        self,
        segments: Sequence[Segment],
        support_height_m: float,  # noqa: ARG002  # the Labeller protocol's; nothing here is measured
    ) -> list[tuple[str | None, float]]:
        return [(None, 0.0)] * len(segments)


def _folder(key: str, folder: str) -> Path:
    path = Path(folder).expanduser()
    if not folder or not path.is_dir():
        raise ConfigError(
            f"perception backend open_vocab needs {key}: a local model folder (save_pretrained layout); "
            f"got {folder!r}, which is not a folder"
        )
    return path


def _import_extra() -> tuple[Any, Any]:
    try:
        # Imported by name: the optional extra is absent where mypy checks the core.
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise ConfigError(
            f"perception backend open_vocab needs the optional extra (transformers + torch, requirements/text.txt): "
            f"{exc}"
        ) from None
    return torch, transformers


def _load(key: str, path: Path, loaders: Sequence[Any]) -> list[Any]:
    """Each loader's `from_pretrained(path, local_files_only=True)`; ConfigError naming
    `key` for a folder that holds no such model."""
    try:
        return [loader.from_pretrained(str(path), local_files_only=True) for loader in loaders]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{key}: cannot load a model from {path}: {exc}") from None


def check_prompts(prompts: Sequence[str]) -> tuple[str, ...]:
    """The object names, deduplicated in order; ConfigError for an empty name or one that
    is a label perception keeps for itself (robot, table, unknown_<n>)."""
    out = tuple(dict.fromkeys(p.strip() for p in prompts))
    for name in out:
        if not _object_name(name):
            raise ConfigError(f"open_vocab prompt {name!r}: an object name, not empty nor a reserved label")
    return out


def _object_name(name: str) -> bool:
    """Not empty and no label perception keeps for itself."""
    return bool(name) and name not in _RESERVED and not name.startswith((UNKNOWN_PREFIX, "support_"))


def task_prompts(
    base: Sequence[str], task_names: Sequence[str], places: Collection[str] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What the detector asks for during a task: the objects the task names (the active
    subtask's first), then `base` (the configured prompts and the scene's objects). Returns
    (prompts, left out): a named place (`places`: the locations perception reports regions
    of, e.g. kitchen_counter) is a region of the table, not an object to look for, and an
    empty or reserved name is no object name."""
    names = [name for name in dict.fromkeys(n.strip() for n in task_names) if name]
    asked = [name for name in names if _object_name(name) and name not in places]
    left_out = tuple(name for name in names if name not in asked)
    return check_prompts([*asked, *base]), left_out


class OpenVocabRecogniser:
    """A `Recogniser` over a local OWLv2 detector and a SAM-family segmenter.

    Per camera image: one text query per object name (`template` with the name, underscores
    as spaces); the highest-scoring box of each name above `score_threshold` (0..1), so one
    region per name, like the catalog labels each entry once; SAM's mask of each box, kept
    inside the box (grown by `box_margin_px`). `prompts` may be replaced between frames
    (the task's target, scene memory's names)."""

    def __init__(
        self,
        models: tuple[Any, Any, Any, Any],
        torch: Any,
        prompts: Sequence[str],
        *,
        score_threshold: float = 0.1,
        template: str = "a photo of a {}",
        device: str = "cpu",
        box_margin_px: int = 2,
    ) -> None:
        if template.count("{}") != 1:
            raise ConfigError(f"open_vocab_prompt_template {template!r} needs exactly one '{{}}' for the name")
        self.detector_processor, self.detector, self.segmenter_processor, self.segmenter = models
        self._torch = torch
        self._prompts = check_prompts(prompts)
        self.base_prompts = self._prompts  # without a task (`task_prompts`' base)
        self.score_threshold = score_threshold
        self.template = template
        self.device = device
        self.box_margin_px = box_margin_px

    @property
    def prompts(self) -> tuple[str, ...]:
        """The object names asked for in each image."""
        return self._prompts

    @prompts.setter
    def prompts(self, names: Sequence[str]) -> None:
        self._prompts = check_prompts(names)

    @classmethod
    def load(
        cls,
        detector_dir: str,
        segmenter_dir: str,
        prompts: Sequence[str],
        *,
        score_threshold: float = 0.1,
        template: str = "a photo of a {}",
        device: str = "cpu",
    ) -> OpenVocabRecogniser:
        """Both models from their local folders (nothing is downloaded), in eval mode on
        `device`. ConfigError naming the config key for a missing or unloadable folder, a
        missing extra or an unknown device."""
        detector_path, segmenter_path = _folder(DETECTOR_KEY, detector_dir), _folder(SEGMENTER_KEY, segmenter_dir)
        torch, transformers = _import_extra()
        processor, detector = _load(
            DETECTOR_KEY, detector_path, (transformers.Owlv2Processor, transformers.Owlv2ForObjectDetection)
        )
        sam_processor, sam = _load(SEGMENTER_KEY, segmenter_path, (transformers.SamProcessor, transformers.SamModel))
        try:
            detector, sam = detector.to(device).eval(), sam.to(device).eval()
        except (RuntimeError, AssertionError) as exc:
            raise ConfigError(f"open_vocab_device {device!r}: {exc}") from None
        return cls(
            (processor, detector, sam_processor, sam),
            torch,
            prompts,
            score_threshold=score_threshold,
            template=template,
            device=device,
        )

    def recognise(self, view: CameraView) -> list[NamedMask]:
        prompts = self.prompts  # once: a new task may replace them meanwhile (perception_node)
        if not prompts or view.rgb is None:
            return []
        rgb = np.ascontiguousarray(view.rgb)
        found = self._detect(rgb, prompts)
        if not found:
            return []
        masks = self._segment(rgb, [box for _, _, box in found])
        out = []
        for (label, score, box), mask in zip(found, masks, strict=True):
            inside = mask & _box_mask(box, mask.shape, self.box_margin_px)
            if inside.any():
                out.append(NamedMask(label, score, inside))
        return out

    def _detect(
        self, rgb: npt.NDArray[np.uint8], prompts: Sequence[str]
    ) -> list[tuple[str, float, tuple[float, float, float, float]]]:
        """(name, score, box x0, y0, x1, y1 in pixels) of the best box of each name."""
        height, width = rgb.shape[:2]
        queries = [self.template.format(name.replace("_", " ")) for name in prompts]
        inputs = self.detector_processor(text=[queries], images=rgb, return_tensors="pt", truncation=True)
        with self._torch.inference_mode():
            outputs = self.detector(**inputs.to(self.device))
        # boxes scaled to the image (the processor pads it square; its post-processing knows)
        result = self.detector_processor.image_processor.post_process_object_detection(
            outputs=outputs, threshold=self.score_threshold, target_sizes=[(height, width)]
        )[0]
        best: dict[int, tuple[float, tuple[float, float, float, float]]] = {}
        for score, index, raw in zip(
            result["scores"].tolist(), result["labels"].tolist(), result["boxes"].tolist(), strict=True
        ):
            x0, y0 = max(0.0, raw[0]), max(0.0, raw[1])
            x1, y1 = min(float(width), raw[2]), min(float(height), raw[3])
            if x1 - x0 < 1.0 or y1 - y0 < 1.0 or not 0 <= index < len(prompts):
                continue  # off the image, or padding
            if score > best.get(index, (-1.0,))[0]:
                best[index] = (float(score), (x0, y0, x1, y1))
        return [(prompts[i], score, box) for i, (score, box) in sorted(best.items())]

    def _segment(
        self, rgb: npt.NDArray[np.uint8], boxes: list[tuple[float, float, float, float]]
    ) -> list[npt.NDArray[np.bool_]]:
        """SAM's mask (H, W) of each box, all from one image embedding."""
        inputs = self.segmenter_processor(images=rgb, input_boxes=[[list(b) for b in boxes]], return_tensors="pt")
        with self._torch.inference_mode():
            outputs = self.segmenter(
                pixel_values=inputs["pixel_values"].to(self.device),
                input_boxes=inputs["input_boxes"].to(self.device),
                multimask_output=False,
            )
        masks = self.segmenter_processor.post_process_masks(
            outputs.pred_masks.cpu(), inputs["original_sizes"], inputs["reshaped_input_sizes"]
        )[0]  # (boxes, 1, H, W) bool
        return [np.asarray(m[0].numpy(), dtype=bool) for m in masks]


def _box_mask(box: tuple[float, float, float, float], shape: tuple[int, ...], margin_px: int) -> npt.NDArray[np.bool_]:
    x0, y0, x1, y1 = box
    out = np.zeros(shape[:2], dtype=bool)
    rows = slice(max(0, int(np.floor(y0)) - margin_px), int(np.ceil(y1)) + margin_px)
    cols = slice(max(0, int(np.floor(x0)) - margin_px), int(np.ceil(x1)) + margin_px)
    out[rows, cols] = True
    return out
