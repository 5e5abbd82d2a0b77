"""The open_vocab backend: named image regions in the tabletop pipeline (a scripted
recogniser, everywhere), its config errors, and tiny random OWLv2 + SAM models loaded
through the backend's own loading code (the optional extra: scripts/test_extra.sh text)."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from perception_fixtures import BLOCKS_JOINTS, SIZE, Box, NoRobot, overhead, tiny_config, tiny_config_dir

from carryon_common.core.clouds import CameraView
from carryon_common.core.errors import ConfigError, UnknownNameError
from carryon_perception.core.build import PERCEPTION_BACKENDS, build_perception
from carryon_perception.core.open_vocab import OpenVocabRecogniser, Unnamed, check_prompts, task_prompts
from carryon_perception.core.regions import NamedMask
from carryon_perception.core.tabletop import TabletopPerception
from carryon_perception.core.types import FIRST_TRACK_ID, ROBOT_ID, TABLE_ID, is_unknown

HAS_EXTRA = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
# Set by `scripts/test_extra.sh text`: there a missing extra is a failure, not a skip.
REQUIRE = os.environ.get("CARRYON_REQUIRE_TEXT_MODEL") == "1"
needs_extra = pytest.mark.skipif(
    not (HAS_EXTRA or REQUIRE),
    reason="open_vocab extra (transformers + torch) not installed in this virtualenv; run scripts/test_extra.sh text",
)

BOWL: Box = ((30, 60, 30, 60), 0.05, (235, 235, 235))
CARROT: Box = ((40, 48, 40, 50), 0.07, (240, 120, 20))  # in the bowl
BOTTLE: Box = ((70, 82, 10, 20), 0.2, (40, 160, 60))  # named by nobody


def region(label: str, rows: tuple[int, int], cols: tuple[int, int], score: float = 0.9) -> NamedMask:
    mask = np.zeros((SIZE, SIZE), dtype=bool)
    mask[rows[0] : rows[1], cols[0] : cols[1]] = True
    return NamedMask(label, score, mask)


class Scripted:
    """A Recogniser that names the same regions in every image."""

    def __init__(self, regions: Sequence[NamedMask]) -> None:
        self.regions = list(regions)
        self.seen: list[str] = []

    def recognise(self, view: CameraView) -> list[NamedMask]:
        self.seen.append(view.camera)
        return self.regions


def pipeline(regions: Sequence[NamedMask], robot: object = None) -> TabletopPerception:
    return TabletopPerception(Unnamed(), robot or NoRobot(), recogniser=Scripted(regions), name="open_vocab")  # type: ignore[arg-type]


# -- named regions in the tabletop pipeline (no model) -----------------------------------------
def test_named_regions_label_their_pixels_and_the_rest_stays_unknown() -> None:
    # the bowl's box holds the carrot and a rim of table: the carrot keeps its pixels, the table stays table
    perception = pipeline([region("bowl", (28, 62), (28, 62), 0.8), region("carrot", (39, 49), (39, 51), 0.4)])
    result = perception.perceive([overhead([BOWL, CARROT, BOTTLE])], {}, None, 0.0)
    by_label = {o.label: o for o in result.objects}
    assert set(by_label) - {"bowl", "carrot"} and all(is_unknown(n) for n in set(by_label) - {"bowl", "carrot"})
    image, labels = result.segmentations["top"].instances, result.segmentations["top"].labels
    carrot, bowl = by_label["carrot"], by_label["bowl"]
    assert (image[40:48, 40:50] == carrot.track_id).all()
    assert (image[31:39, 31:59] == bowl.track_id).all()
    assert (image[28:30, 28:62] == TABLE_ID).all()  # the region's table pixels are not the bowl
    assert labels[carrot.track_id] == "carrot" and labels[bowl.track_id] == "bowl"
    bottle = [o for o in result.objects if is_unknown(o.label)]
    assert len(bottle) == 1 and (image[70:82, 10:20] == bottle[0].track_id).all()
    assert carrot.score == pytest.approx(0.4) and carrot.support == "bowl"
    assert "recognise" in result.timings_ms and perception.name == "open_vocab"
    # ids stay with their names from frame to frame
    again = perception.perceive([overhead([BOWL, CARROT, BOTTLE])], {}, None, 1.0)
    assert {o.label: o.track_id for o in again.objects} == {o.label: o.track_id for o in result.objects}


def test_every_object_pixel_stays_in_some_object_with_or_without_regions() -> None:
    boxes = [BOWL, CARROT, BOTTLE]
    for regions in ([], [region("carrot", (39, 49), (39, 51))], [region("bottle", (0, SIZE), (0, SIZE))]):
        image = pipeline(regions).perceive([overhead(boxes)], {}, None, 0.0).segmentations["top"].instances
        for (r0, r1, c0, c1), _, _ in boxes:
            assert (image[r0:r1, c0:c1] >= FIRST_TRACK_ID).all(), regions


def test_a_region_on_the_table_or_the_robot_names_nothing() -> None:
    class RobotAbove:  # everything more than 0.3 m above the table is the arm
        def mask(self, points: np.ndarray, joints: object, gripper_width_m: float | None = None) -> np.ndarray:
            return points[:, 2] > 0.42 + 0.3

    arm: Box = ((0, 20, 0, SIZE), 0.5, (90, 90, 90))
    regions = [
        region("plate", (85, 95), (60, 90)),
        region("gripper", (0, 22), (0, SIZE)),
        region("bowl", (30, 60), (30, 60)),
    ]
    result = pipeline(regions, RobotAbove()).perceive([overhead([arm, BOWL])], {}, None, 0.0)
    assert {o.label for o in result.objects} == {"bowl"}
    assert (result.segmentations["top"].instances[0:20] == ROBOT_ID).all()


def test_a_mask_of_another_size_is_an_error() -> None:
    wrong = NamedMask("bowl", 0.9, np.ones((10, 10), dtype=bool))
    with pytest.raises(ValueError, match="bowl"):
        pipeline([wrong]).perceive([overhead([BOWL])], {}, None, 0.0)


def test_prompts_must_be_object_names() -> None:
    assert check_prompts(["carrot", " bowl", "carrot"]) == ("carrot", "bowl")
    for bad in ("robot", "table", "unknown_3", "support_1", ""):
        with pytest.raises(ConfigError, match="prompt"):
            check_prompts([bad])


def test_a_task_asks_first_for_the_objects_it_names_and_never_for_a_place() -> None:
    prompts, left_out = task_prompts(
        ["bowl", "bottle"], ["carrot", "bowl", "kitchen_counter", "", "robot", "carrot"], places={"kitchen_counter"}
    )
    assert prompts == ("carrot", "bowl", "bottle")  # the task's objects first, then the rest once
    assert left_out == ("kitchen_counter", "robot")
    assert task_prompts(["bowl"], []) == (("bowl",), ())  # no task: the configured prompts


def test_recognise_asks_for_the_prompts_of_its_call_even_when_a_task_replaces_them() -> None:
    class Detector:  # answers for the queries it was given: every prompt found, box by index
        def __init__(self, owner: OpenVocabRecogniser) -> None:
            self.owner = owner
            self.queries: list[str] = []

        def detect(self, rgb: np.ndarray, prompts: Sequence[str]) -> list[tuple[str, float, tuple[float, ...]]]:
            self.queries = list(prompts)
            self.owner.prompts = ["bottle"]  # a new plan arrives while this image is looked at
            return [(name, 0.9, (0.0, 0.0, 8.0, 8.0)) for name in prompts]

    recogniser = OpenVocabRecogniser((None, None, None, None), None, ["carrot", "bowl"])
    assert recogniser.base_prompts == ("carrot", "bowl")
    detector = Detector(recogniser)
    recogniser._detect = detector.detect  # type: ignore[method-assign]
    recogniser._segment = lambda rgb, boxes: [np.ones(rgb.shape[:2], dtype=bool) for _ in boxes]  # type: ignore[method-assign]
    named = recogniser.recognise(overhead([BOWL, CARROT]))
    assert detector.queries == ["carrot", "bowl"] and [r.label for r in named] == ["carrot", "bowl"]
    assert recogniser.prompts == ("bottle",) and recogniser.base_prompts == ("carrot", "bowl")


# -- config errors (no model needed) -------------------------------------------------------------
def test_the_backend_is_registered_and_a_typo_suggests_it() -> None:
    assert "open_vocab" in PERCEPTION_BACKENDS
    with pytest.raises(UnknownNameError, match="open_vocab"):
        PERCEPTION_BACKENDS.get("open_vocb")


def test_a_missing_model_folder_is_a_config_error_naming_its_key(tmp_path: Path) -> None:
    config_dir = tiny_config_dir(tmp_path / "config")
    (tmp_path / "owlv2").mkdir()
    missing_detector = tiny_config(backend="open_vocab", open_vocab_detector_dir=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="open_vocab_detector_dir"):
        build_perception(missing_detector, config_dir)
    missing_segmenter = tiny_config(backend="open_vocab", open_vocab_detector_dir=str(tmp_path / "owlv2"))
    with pytest.raises(ConfigError, match="open_vocab_segmenter_dir"):
        build_perception(missing_segmenter, config_dir)


@pytest.mark.skipif(HAS_EXTRA, reason="transformers + torch are installed here")
def test_without_the_extra_the_error_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="optional extra"):
        OpenVocabRecogniser.load(str(tmp_path), str(tmp_path), ["carrot"])


# -- tiny random models through the real loading code (the extra) --------------------------------
def _tiny_models(root: Path, *, detect: bool) -> tuple[Path, Path]:  # pragma: no cover - extra only
    """An OWLv2 detector and a SAM segmenter with tiny random weights, saved with their
    processors. The detector's logit shift and scale are pinned (every box scores ~1, or ~0
    when not `detect`) and SAM's mask head always answers its whole box, so both paths are taken."""
    import torch
    from transformers import (
        CLIPTokenizerFast,
        Owlv2Config,
        Owlv2ForObjectDetection,
        Owlv2ImageProcessor,
        Owlv2Processor,
        SamConfig,
        SamImageProcessor,
        SamModel,
        SamProcessor,
    )

    torch.manual_seed(0)
    root.mkdir(parents=True)
    tokens = ["!", "a</w>", "photo</w>", "of</w>", "carrot</w>", "bowl</w>", "<|startoftext|>", "<|endoftext|>"]
    (root / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (root / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizerFast(
        str(root / "vocab.json"), str(root / "merges.txt"), pad_token="!", model_max_length=16
    )
    detector = Owlv2ForObjectDetection(Owlv2Config(
        text_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
                     "vocab_size": len(tokens), "max_position_embeddings": 16},
        vision_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
                       "image_size": 32, "patch_size": 8},
        projection_dim=16,
    ))  # fmt: skip
    sam = SamModel(SamConfig(
        vision_config={"hidden_size": 16, "output_channels": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 64, "patch_size": 8, "window_size": 4, "global_attn_indexes": [0],
                       "num_pos_feats": 4, "mlp_dim": 16},
        prompt_encoder_config={"hidden_size": 8, "image_size": 64, "patch_size": 8, "mask_input_channels": 4},
        mask_decoder_config={"hidden_size": 8, "mlp_dim": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "iou_head_hidden_dim": 8},
    ))  # fmt: skip
    with torch.no_grad():
        detector.class_head.logit_shift.weight.zero_()
        detector.class_head.logit_shift.bias.fill_(8.0 if detect else -8.0)
        detector.class_head.logit_scale.weight.zero_()
        detector.class_head.logit_scale.bias.fill_(1.0)  # logits (similarity +- 8) * 2
        sam.mask_decoder.upscale_conv2.weight.zero_()
        sam.mask_decoder.upscale_conv2.bias.fill_(1.0)
        for mlp in sam.mask_decoder.output_hypernetworks_mlps:
            mlp.proj_out.weight.zero_()
            mlp.proj_out.bias.fill_(1.0)
    detector.save_pretrained(root / "owlv2")
    Owlv2Processor(Owlv2ImageProcessor(size={"height": 32, "width": 32}), tokenizer).save_pretrained(root / "owlv2")
    sam.save_pretrained(root / "sam")
    SamProcessor(SamImageProcessor(size={"longest_edge": 64}, pad_size={"height": 64, "width": 64})).save_pretrained(
        root / "sam"
    )
    return root / "owlv2", root / "sam"


@pytest.fixture(scope="module")
def detecting(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:  # pragma: no cover - extra only
    return _tiny_models(tmp_path_factory.mktemp("models") / "detecting", detect=True)


@pytest.fixture(scope="module")
def blind(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:  # pragma: no cover - extra only
    return _tiny_models(tmp_path_factory.mktemp("models") / "blind", detect=False)


@needs_extra
def test_tiny_models_load_and_name_at_most_one_region_per_prompt(detecting: tuple[Path, Path]) -> None:
    recogniser = OpenVocabRecogniser.load(str(detecting[0]), str(detecting[1]), ["carrot", "bowl"])
    regions = recogniser.recognise(overhead([BOWL, CARROT]))
    assert regions, "every box scores ~1: each prompt names a region"
    assert len({r.label for r in regions}) == len(regions) and {r.label for r in regions} <= {"carrot", "bowl"}
    for r in regions:
        assert r.mask.shape == (SIZE, SIZE) and r.mask.dtype == bool and r.mask.any() and 0.0 < r.score <= 1.0
    recogniser.prompts = ()
    assert recogniser.recognise(overhead([BOWL])) == []  # nothing asked, nothing named
    with pytest.raises(ConfigError, match="robot"):
        recogniser.prompts = ["robot"]


@needs_extra
def test_the_backend_builds_from_config_and_keeps_every_pixel(detecting: tuple[Path, Path], tmp_path: Path) -> None:
    config = tiny_config(
        backend="open_vocab",
        open_vocab_detector_dir=str(detecting[0]),
        open_vocab_segmenter_dir=str(detecting[1]),
        objects=["carrot", "bowl"],  # names the empty catalog lacks: the detector needs no reference views
    )
    perception = build_perception(config, tiny_config_dir(tmp_path))
    assert perception.name == "open_vocab"
    boxes = [BOWL, CARROT, BOTTLE]
    result = perception.perceive([overhead(boxes)], BLOCKS_JOINTS, None, 0.0)
    segmentation = result.segmentations["top"]
    assert segmentation.instances.shape == (SIZE, SIZE) and segmentation.instances.dtype == np.int32
    assert [p.label for p in result.planes] == ["table"]
    for (r0, r1, c0, c1), _, _ in boxes:
        assert (segmentation.instances[r0:r1, c0:c1] >= FIRST_TRACK_ID).all()
    labels = [o.label for o in result.objects]
    assert len(set(labels)) == len(labels)
    assert all(label in ("carrot", "bowl") or is_unknown(label) for label in labels)
    present = set(np.unique(segmentation.instances).tolist()) - {0}
    assert set(segmentation.labels) >= present and segmentation.labels[TABLE_ID] == "table"


@needs_extra
def test_each_detected_region_becomes_an_object_of_its_name(detecting: tuple[Path, Path], tmp_path: Path) -> None:
    # No support plane (too few inliers allowed): every pixel stands on nothing and is an
    # object candidate, so wherever the random boxes land, their masks name what is there.
    config = tiny_config(
        backend="open_vocab",
        open_vocab_detector_dir=str(detecting[0]),
        open_vocab_segmenter_dir=str(detecting[1]),
        objects=["carrot", "bowl"],
        plane_min_inliers=10**6,
    )
    perception = build_perception(config, tiny_config_dir(tmp_path))
    view = overhead([BOWL, CARROT])
    assert perception.recogniser is not None
    regions = perception.recogniser.recognise(view)
    result = perception.perceive([view], BLOCKS_JOINTS, None, 0.0)
    assert not result.planes
    named = {o.label: o for o in result.objects if not is_unknown(o.label)}
    assert set(named) == {r.label for r in regions} != set()
    smallest = min(regions, key=lambda r: int(r.mask.sum()))
    assert (result.segmentations["top"].instances[smallest.mask] == named[smallest.label].track_id).all()


@needs_extra
def test_a_model_that_detects_nothing_leaves_every_object_unknown(blind: tuple[Path, Path], tmp_path: Path) -> None:
    recogniser = OpenVocabRecogniser.load(str(blind[0]), str(blind[1]), ["carrot", "bowl"])
    assert recogniser.recognise(overhead([BOWL, CARROT])) == []
    perception = TabletopPerception(Unnamed(), NoRobot(), recogniser=recogniser)  # type: ignore[arg-type]
    result = perception.perceive([overhead([BOWL, CARROT, BOTTLE])], {}, None, 0.0)
    assert result.objects and all(is_unknown(o.label) for o in result.objects)


@needs_extra
def test_a_folder_without_a_model_is_a_config_error_naming_its_key(
    detecting: tuple[Path, Path], tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="open_vocab_detector_dir"):
        OpenVocabRecogniser.load(str(tmp_path / "empty"), str(detecting[1]), ["carrot"])
    with pytest.raises(ConfigError, match="open_vocab_segmenter_dir"):
        OpenVocabRecogniser.load(str(detecting[0]), str(tmp_path / "empty"), ["carrot"])
