"""lerobot_local: a LeRobot policy (ACT, pi0, pi0.5, SmolVLA, ...) loaded from a local
folder saved with `save_pretrained`, run in this process with torch.

An optional extra (requirements/lerobot.txt, `scripts/test_lerobot_extra.sh`): torch and
lerobot are imported only when this backend is built, never by the rest of CarryOn.
Nothing is downloaded: the folder must hold config.json, model.safetensors and the
policy_preprocessor.json / policy_postprocessor.json pipelines (with their normalisation
statistics) that LeRobot >= 0.4 saves beside the model.

Images go in as float32 (3, H, W) in [0, 1] at the checkpoint's own input size, states as
float32 vectors, the instruction as "task". The chunk comes from `predict_action_chunk`,
so policies that predict from the current observation work (ACT, pi0, pi0.5, SmolVLA);
policies that keep an observation history in `select_action` (Diffusion, VQ-BeT) are not
supported yet.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from carryon_common.core.errors import ConfigError
from carryon_policy.core.action_mapping import ActionMapper, Kinematics, mapped_metadata
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.layout import ACTION_PARTS, STATE_PARTS, parse_camera_map
from carryon_policy.core.observation_mapping import ObservationMapper
from carryon_policy.core.policy import (
    MissingObservation,
    Observation,
    PolicyMetadata,
    PolicyOutput,
    PolicyUnavailable,
)

INSTALL_HINT = "install the lerobot extra: see requirements/lerobot.txt and scripts/test_lerobot_extra.sh"
CHECKPOINT_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")

_torchvision_ops: Any = None  # keeps the op schemas declared by _make_torchvision_importable alive


def _make_torchvision_importable(torch: Any) -> None:
    """Let torchvision import when its compiled ops cannot load.

    PyPI's torchvision wheels are CUDA builds; beside a CPU-only torch their C++ extension
    fails to load, and `import torchvision` then fails while registering fake kernels for
    `nms` / `qnms` (it checks for the ops elsewhere, not there). LeRobot's policies use
    only torchvision's pure-Python parts (ResNet backbones, FrozenBatchNorm2d), so when the
    extension cannot load, declare those two op schemas, without kernels, so the import
    succeeds. Where torchvision matches torch (a CUDA machine) this does nothing.
    """
    global _torchvision_ops  # noqa: PLW0603 - one library object per process
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations or _torchvision_ops is not None:
        return
    for folder in spec.submodule_search_locations:
        for library in Path(folder).glob("_C*.so"):
            try:
                torch.ops.load_library(str(library))
            except (OSError, RuntimeError):
                continue
            return
    _torchvision_ops = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _torchvision_ops.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


def _import_lerobot() -> tuple[Any, Any, Any]:
    """(torch, PreTrainedConfig, lerobot.policies.factory). Raises PolicyUnavailable."""
    try:
        torch = importlib.import_module("torch")
        _make_torchvision_importable(torch)
        configs = importlib.import_module("lerobot.configs.policies")
        factory = importlib.import_module("lerobot.policies.factory")
    except ImportError as exc:
        raise PolicyUnavailable(f"backend lerobot_local cannot import {exc.name or exc}: {INSTALL_HINT}") from None
    except OSError as exc:  # a torch whose shared libraries do not load
        raise PolicyUnavailable(f"backend lerobot_local: torch does not load ({exc}): {INSTALL_HINT}") from None
    return torch, configs.PreTrainedConfig, factory


def _static_size(parts: tuple[str, ...], sizes: dict[str, int | None]) -> int | None:
    """Values in a layout, or None when it has `joints` (known once the robot reports them)."""
    if any(sizes[p] is None for p in parts):
        return None
    return sum(sizes[p] or 0 for p in parts)


def _features(config: Any, kind: str) -> dict[str, tuple[int, ...]]:
    """Input or output features of a LeRobot policy config of FeatureType `kind` -> shape."""
    features = {**config.input_features, **config.output_features}
    return {key: tuple(f.shape) for key, f in features.items() if f.type.name == kind}


class LerobotEngine:
    """A loaded LeRobot policy with its pre/post-processing pipelines: raw chunks from
    images and states under the checkpoint's own keys (lerobot_local maps the robot's
    observation to them; a policy server gets them from its client)."""

    def __init__(
        self,
        *,
        torch: Any,
        policy: Any,
        preprocessor: Any,
        postprocessor: Any,
        policy_type: str,
        state_shapes: dict[str, tuple[int, ...]],
        image_shapes: dict[str, tuple[int, ...]],
    ) -> None:
        self._torch = torch
        self.policy_type = policy_type
        self.state_shapes = state_shapes
        self.image_shapes = image_shapes  # key -> (3, H, W)
        self._policy = policy
        self._preprocessor = preprocessor
        self._postprocessor = postprocessor
        self._lock = threading.Lock()

    def set_threads(self, threads: int) -> None:
        """CPU threads torch uses for inference (process-wide)."""
        self._torch.set_num_threads(threads)

    def reset(self, seed: int) -> None:
        """New episode: clear the policy's queues and seed torch (sampling policies use it)."""
        with self._lock:
            if self._policy is None:
                raise PolicyUnavailable("the LeRobot policy is closed")
            self._torch.manual_seed(seed)
            self._policy.reset()

    def raw_chunk(self, images: Mapping[str, Any], states: Mapping[str, Any], task: str) -> np.ndarray:
        """The checkpoint's own action chunk (H, D), de-normalised, before any mapping, for
        images (H, W, 3) uint8 at the checkpoint's sizes and state vectors under its keys.
        Raises MissingObservation, PolicyUnavailable."""
        torch = self._torch
        batch: dict[str, Any] = {}
        for key, shape in self.image_shapes.items():
            image = np.asarray(images[key]) if key in images else None
            if image is None or image.dtype != np.uint8 or image.shape != (shape[1], shape[2], shape[0]):
                got = "missing" if image is None else f"{image.dtype} {image.shape}"
                raise MissingObservation(f"image {key} is {got}, the checkpoint expects uint8 {shape[1:]} x 3")
            batch[key] = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float().div_(255.0)
        for key, shape in self.state_shapes.items():
            state = np.asarray(states[key], dtype=np.float64).reshape(-1) if key in states else np.zeros(0)
            if state.shape != shape:
                raise MissingObservation(f"state {key} has {state.shape[0]} values, the checkpoint expects {shape}")
            batch[key] = torch.from_numpy(state.astype(np.float32))
        batch["task"] = task
        with self._lock, torch.inference_mode():
            if self._policy is None:
                raise PolicyUnavailable("the LeRobot policy is closed")
            try:
                chunk = self._postprocessor(self._policy.predict_action_chunk(self._preprocessor(batch)))
            except Exception as exc:  # torch raises many kinds; re-raised with the cause for the node to report
                raise PolicyUnavailable(f"LeRobot {self.policy_type} inference failed: {exc}") from exc
        raw = chunk.detach().to("cpu").numpy()
        if raw.ndim == 3 and raw.shape[0] == 1:
            raw = raw[0]
        return np.asarray(raw, dtype=np.float64)

    def close(self) -> None:
        with self._lock:
            self._policy = None
            self._preprocessor = None
            self._postprocessor = None


class LerobotLocalPolicy:
    """`Policy` around a `LerobotEngine`: the robot's observation mapped to its inputs,
    its raw chunk mapped to commands (see module)."""

    def __init__(
        self, checkpoint_dir: Path, observations: ObservationMapper, actions: ActionMapper, engine: LerobotEngine
    ) -> None:
        self.engine = engine
        self._observations = observations
        self._actions = actions
        self._instruction = ""
        self._metadata = mapped_metadata(
            "lerobot_local", f"LeRobot {engine.policy_type} policy from {checkpoint_dir}", observations, actions
        )

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self, instruction: str, seed: int) -> None:
        self.engine.reset(seed)
        self._instruction = instruction

    def infer(self, observation: Observation) -> PolicyOutput:
        images = self._observations.images(observation)
        raw = self.engine.raw_chunk(images, self._observations.states(observation), self._instruction)
        return self._actions.to_output(raw, observation)

    def close(self) -> None:
        self.engine.close()


def checkpoint_folder(path: str | Path) -> Path:
    """`path` as a checkpoint folder. Raises PolicyUnavailable when it lacks a file LeRobot
    needs (checked before LeRobot sees the path: a non-folder would send it to the Hub)."""
    folder = Path(path).expanduser()
    missing = [name for name in CHECKPOINT_FILES if not (folder / name).is_file()]
    if missing:
        raise PolicyUnavailable(f"LeRobot checkpoint {folder} lacks {', '.join(missing)}")
    return folder


def read_policy_config(folder: Path, device: str) -> tuple[Any, Any, Any]:
    """(torch, the checkpoint's LeRobot config, lerobot.policies.factory): the config only,
    nothing heavy loaded yet. Raises PolicyUnavailable."""
    torch, pretrained_config, factory = _import_lerobot()
    try:
        policy_config = pretrained_config.from_pretrained(folder, local_files_only=True)
        policy_config.device = device
    except Exception as exc:  # LeRobot and draccus raise many kinds; all mean "cannot load"
        raise PolicyUnavailable(f"cannot read the LeRobot config in {folder}: {exc}") from exc
    return torch, policy_config, factory


def load_engine(folder: Path, device: str, read: tuple[Any, Any, Any] | None = None) -> LerobotEngine:
    """Load the checkpoint in `folder` (its config already read: `read`). Raises PolicyUnavailable."""
    torch, policy_config, factory = read or read_policy_config(folder, device)
    try:
        policy_class = factory.get_policy_class(policy_config.type)
        policy = policy_class.from_pretrained(folder, config=policy_config, local_files_only=True)
        preprocessor, postprocessor = factory.make_pre_post_processors(
            policy_config,
            pretrained_path=str(folder),
            preprocessor_overrides={"device_processor": {"device": device}},
        )
    except Exception as exc:  # torch, safetensors and LeRobot raise many kinds
        raise PolicyUnavailable(f"cannot load the LeRobot policy in {folder}: {exc}") from exc
    return LerobotEngine(
        torch=torch,
        policy=policy,
        preprocessor=preprocessor,
        postprocessor=postprocessor,
        policy_type=str(policy_config.type),
        state_shapes=_features(policy_config, "STATE"),
        image_shapes=_features(policy_config, "VISUAL"),
    )


def make_lerobot_policy(config: PolicyConfig, kinematics: Kinematics | None = None) -> LerobotLocalPolicy:
    """The lerobot_local backend from config: loads the checkpoint now.

    Raises ConfigError when the configuration does not fit the checkpoint (camera or state
    keys, sizes), PolicyUnavailable when the extra is missing or the checkpoint cannot load.
    """
    if not config.lerobot_checkpoint_dir:
        raise ConfigError("backend lerobot_local needs lerobot_checkpoint_dir (a folder saved with save_pretrained)")
    folder = checkpoint_folder(config.lerobot_checkpoint_dir)
    actions = ActionMapper.from_config(config, config.chunk_horizon, kinematics)
    read = read_policy_config(folder, config.lerobot_device)
    policy_config = read[1]

    visual = _features(policy_config, "VISUAL")
    states = _features(policy_config, "STATE")
    cameras = parse_camera_map(config.vla_cameras)
    mapper = ObservationMapper.from_config(config, sizes={key: (shape[1], shape[2]) for key, shape in visual.items()})
    problems = []
    if {b.policy_key for b in cameras} != set(visual):
        problems.append(
            f"the checkpoint reads images {sorted(visual)}, vla_cameras maps {sorted(b.policy_key for b in cameras)}"
        )
    if {b.policy_key for b in mapper.state_bindings} != set(states):
        problems.append(
            f"the checkpoint reads state {sorted(states)}, vla_state maps "
            f"{sorted(b.policy_key for b in mapper.state_bindings)}"
        )
    unknown_inputs = set(policy_config.input_features) - set(visual) - set(states)
    if unknown_inputs:
        problems.append(f"the checkpoint reads inputs CarryOn cannot provide: {sorted(unknown_inputs)}")
    for binding in mapper.state_bindings:
        size = _static_size(binding.parts, STATE_PARTS)
        if binding.policy_key in states and size is not None and (size,) != states[binding.policy_key]:
            problems.append(
                f"state {binding.policy_key} is {states[binding.policy_key]} in the checkpoint, vla_state gives {size} "
                f"values ({'+'.join(binding.parts)})"
            )
    action_shape = _features(policy_config, "ACTION").get("action")
    width = _static_size(actions.layout, ACTION_PARTS)
    if action_shape is None:
        problems.append("the checkpoint has no 'action' output")
    elif width is not None and width > action_shape[0]:
        problems.append(f"actions have {action_shape[0]} values, vla_action_layout needs {width}")
    absent = [b.camera for b in cameras if b.camera not in config.cameras]
    if absent:
        problems.append(f"vla_cameras reads robot camera(s) {', '.join(absent)} that are not in cameras")
    if problems:
        raise ConfigError(f"lerobot_local: {folder}: " + "; ".join(problems))

    return LerobotLocalPolicy(folder, mapper, actions, load_engine(folder, config.lerobot_device, read))
