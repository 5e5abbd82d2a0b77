"""The one builder of a perception pipeline: perception_node, the harness and `carryon
bench perception` all call it, so they cannot drift.

Backends by name (`PerceptionConfig.backend`): `tabletop` (default in both profiles; no
learned weights) and `open_vocab` (the tabletop pipeline with labels from a text-prompted
detector + segmenter; the optional extra, imported only when this backend is built). Either
takes the `namer` option (unidentified objects named by a vision-language model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from carryon_common.core.config import load_node_config, under_config_dir
from carryon_common.core.locations import load_locations
from carryon_common.core.registry import Registry
from carryon_perception.core.appearance import Appearance, describe
from carryon_perception.core.catalog import DEFAULT_COSTS, Catalog
from carryon_perception.core.config import PerceptionConfig
from carryon_perception.core.namer import NamerParams, VlmNameAsker, VlmNamer
from carryon_perception.core.open_vocab import OpenVocabRecogniser, Unnamed
from carryon_perception.core.planes import PlaneParams
from carryon_perception.core.regions import Recogniser
from carryon_perception.core.segment import Segment, SegmentParams
from carryon_perception.core.self_filter import RobotSelfFilter
from carryon_perception.core.tabletop import Labeller, TabletopParams, TabletopPerception
from carryon_perception.core.tracker import Tracker
from carryon_robot.core.kinematics import load_robot


@dataclass(frozen=True)
class PerceptionBackend:
    name: str
    description: str
    make: Callable[[PerceptionConfig, Path | None], TabletopPerception]


PERCEPTION_BACKENDS: Registry[PerceptionBackend] = Registry("perception backend")


class CatalogLabeller:
    """Labels one camera's segments against the catalog (each entry at most once)."""

    def __init__(
        self,
        catalog: Catalog,
        candidates: Sequence[str] = (),
        *,
        piece_gap_m: float = 0.03,
        fragment_px: int = 200,
        fragment_gap_m: float = 0.015,
    ) -> None:
        self.catalog = catalog
        self.piece_gap_m = piece_gap_m
        self.fragment_px, self.fragment_gap_m = fragment_px, fragment_gap_m
        self.candidates = tuple(candidates) or None
        if self.candidates is not None:
            for name in self.candidates:
                catalog.entry(name)  # an unknown name fails at start-up, not at the first frame

    def label_segments(self, segments: Sequence[Segment], support_height_m: float) -> list[tuple[str | None, float]]:
        appearances = [describe(s.colors, s.points, _base(s, support_height_m), partial=s.partial) for s in segments]
        out = [(m.label, m.score) for m in self.catalog.label(appearances, candidates=self.candidates)]
        return self._join_pieces(segments, appearances, out)

    def _join_pieces(
        self, segments: Sequence[Segment], appearances: list[Appearance], named: list[tuple[str | None, float]]
    ) -> list[tuple[str | None, float]]:
        """An unlabelled segment whose best match is an entry another segment of this camera
        already holds, within `piece_gap_m` of it, is another piece of that object (a cover's
        handle and its lit top): it takes the same label (fusion makes them one object). So
        does a fragment of at most `fragment_px` pixels within `fragment_gap_m` of a named
        segment, whatever it looks like."""
        loose = [i for i, (label, _) in enumerate(named) if label is None]
        if not loose:
            return named
        names = sorted(self.catalog.entries) if self.candidates is None else sorted(self.candidates)
        cost = self.catalog.costs([appearances[i] for i in loose], names)
        holders = {label: i for i, (label, _) in enumerate(named) if label is not None}
        out = list(named)
        trees = {label: cKDTree(segments[i].points) for label, i in holders.items() if len(segments[i].points)}
        for row, i in enumerate(loose):
            piece = segments[i]
            if len(piece.points) == 0:
                continue
            gaps = {label: float(np.min(tree.query(piece.points, k=1)[0])) for label, tree in trees.items()}
            j = int(np.argmin(cost[row])) if len(names) else -1
            if j >= 0 and cost[row, j] <= DEFAULT_COSTS.max_cost and gaps.get(names[j], np.inf) <= self.piece_gap_m:
                out[i] = (names[j], max(0.0, 1.0 - float(cost[row, j]) / DEFAULT_COSTS.max_cost))
                continue
            # a small fragment touching a named object is a piece of it (an object's part beside
            # the fingers that hold it, too small to match on its own)
            nearest = min(gaps, key=lambda label: gaps[label], default=None)
            if nearest is not None and len(piece.pixels) <= self.fragment_px and gaps[nearest] <= self.fragment_gap_m:
                out[i] = (nearest, 0.0)
        return out


def _base(segment: Segment, support_height_m: float, lifted_m: float = 0.02) -> float:
    """Where a segment's height is measured from: the support plane, or its own bottom when
    it is lifted off it (held in the gripper): its height is then its own extent, not how
    high it is carried."""
    if len(segment.points) == 0:
        return support_height_m
    bottom = float(np.sort(segment.points[:, 2])[: max(1, len(segment.points) // 50)].mean())
    return bottom if bottom > support_height_m + lifted_m else support_height_m


def config_file(configured: str, config_dir: Path | None, *default: str) -> Path:
    """A file named by a config value, as an absolute path: under `config_dir` when given
    (benchmarks), else under the config folder ($CARRYON_CONFIG_DIR or ./config)."""
    if config_dir is None or Path(configured).expanduser().is_absolute():
        return under_config_dir(configured, *default).resolve()
    return (config_dir / (Path(configured) if configured else Path(*default))).resolve()


def _pipeline(
    config: PerceptionConfig,
    config_dir: Path | None,
    labeller: Labeller,
    known: list[str],
    recogniser: Recogniser | None = None,
) -> TabletopPerception:
    """The tabletop pipeline around `labeller` (and `recogniser`); `known`: the object
    names a namer should prefer."""
    robot = load_robot(str(config_file(config.robot_file, config_dir, "robot", "panda.yaml")))
    locations = load_locations(config_file(config.locations_file, config_dir))
    params = TabletopParams(
        max_depth_m=config.max_depth_m,
        workspace_min=tuple(config.workspace_min),  # type: ignore[arg-type]
        workspace_max=tuple(config.workspace_max),  # type: ignore[arg-type]
        min_object_height_m=config.min_object_height_m,
        max_object_height_m=config.max_object_height_m,
        planes=PlaneParams(distance_m=config.plane_distance_m, min_inliers=config.plane_min_inliers),
        segments=SegmentParams(depth_jump_m=config.depth_jump_m, chroma_edge=config.chroma_edge),
    )
    return TabletopPerception(
        labeller,
        RobotSelfFilter(robot, margin_m=config.self_filter_margin_m, tool_margin_m=config.self_filter_tool_margin_m),
        locations,
        params,
        Tracker(config.track_match_m),
        recogniser=recogniser,
        namer=build_namer(config, known),
        name=config.backend,
    )


def build_namer(config: PerceptionConfig, known: list[str]) -> VlmNamer | None:
    """The `namer` option: None, or a VLM namer at `namer_base_url` preferring the `known`
    names. ConfigError when a remote endpoint's API key variable is unset."""
    if config.namer == "none":
        return None
    from carryon_common.core.openai_client import ResponseFormat, openai_client_from_env

    client = openai_client_from_env(
        config.namer_base_url,
        config.namer_model,
        config.namer_api_key_env,
        config.namer_request_timeout_s,
        response_format=ResponseFormat.JSON_OBJECT if config.namer_json_mode else ResponseFormat.NONE,
        attempts=1,
    )
    params = NamerParams(
        request_timeout_s=config.namer_request_timeout_s,
        retry_s=config.namer_retry_s,
        image_max_px=config.namer_image_max_px,
    )
    return VlmNamer(VlmNameAsker(client, known, params), params)


def _known_names(config: PerceptionConfig, catalog: Catalog) -> list[str]:
    return list(config.objects) or sorted(catalog.entries)


def _tabletop(config: PerceptionConfig, config_dir: Path | None) -> TabletopPerception:
    catalog = Catalog.load(config_file(config.catalog_file, config_dir))
    return _pipeline(config, config_dir, CatalogLabeller(catalog, config.objects), _known_names(config, catalog))


def _open_vocab(config: PerceptionConfig, config_dir: Path | None) -> TabletopPerception:
    """Prompts: `open_vocab_prompts`, then `objects` (else every catalog entry)."""
    catalog = Catalog.load(config_file(config.catalog_file, config_dir))
    known = _known_names(config, catalog)
    recogniser = OpenVocabRecogniser.load(
        config.open_vocab_detector_dir,
        config.open_vocab_segmenter_dir,
        [*config.open_vocab_prompts, *known],
        score_threshold=config.open_vocab_score_threshold,
        template=config.open_vocab_prompt_template,
        device=config.open_vocab_device,
    )
    return _pipeline(config, config_dir, Unnamed(), known, recogniser)


PERCEPTION_BACKENDS.register(
    "tabletop",
    PerceptionBackend(
        "tabletop", "depth + colour segmentation on support planes, labels from the object catalog", _tabletop
    ),
)
PERCEPTION_BACKENDS.register(
    "open_vocab",
    PerceptionBackend(
        "open_vocab",
        "the tabletop pipeline with labels from a text-prompted detector + segmenter (OWLv2 + SAM, local folders; "
        "optional extra: transformers + torch)",
        _open_vocab,
    ),
)


def build_perception(config: PerceptionConfig, config_dir: Path | None = None) -> TabletopPerception:
    """The configured backend; files relative to `config_dir` when given. ConfigError on a
    bad file or an unknown backend name (with the closest name)."""
    return PERCEPTION_BACKENDS.get(config.backend).make(config, config_dir)


def scene_locations_file(scene: str) -> str:
    """The planner's locations file of a simulated scene (benchmarks)."""
    return "planner/locations.yaml" if scene == "food_serving" else f"planner/locations_{scene}.yaml"


def build_tabletop(
    config_dir: Path, scene: str, objects: Sequence[str] = (), config: PerceptionConfig | None = None
) -> TabletopPerception:
    """The pipeline for a simulated scene (benchmarks): `config` (default: perception_node's
    config file under `config_dir`) with that scene's locations file and, when given, the
    names of the objects it holds (what scene memory would list)."""
    if config is None:
        config_file_path = config_dir / "nodes" / "perception_node.yaml"
        files = [config_file_path] if config_file_path.is_file() else []
        config = load_node_config(PerceptionConfig, files, "perception_node", "/", {})
    update: dict[str, object] = {"locations_file": scene_locations_file(scene)}
    if objects:
        update["objects"] = list(objects)
    return build_perception(config.model_copy(update=update), config_dir)
