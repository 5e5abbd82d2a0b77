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


class LerobotLocalPolicy:
    """`Policy` around a LeRobot policy and its pre/post-processing pipelines (see module)."""

    def __init__(
        self,
        checkpoint_dir: Path,
        observations: ObservationMapper,
        actions: ActionMapper,
        *,
        torch: Any,
        policy: Any,
        preprocessor: Any,
        postprocessor: Any,
        policy_type: str,
        state_shapes: dict[str, tuple[int, ...]],
    ) -> None:
        self._torch = torch
        self._policy_type = policy_type
        self._state_shapes = state_shapes
        self._policy = policy
        self._preprocessor = preprocessor
        self._postprocessor = postprocessor
        self._observations = observations
        self._actions = actions
        self._lock = threading.Lock()
        self._instruction = ""
        self._metadata = mapped_metadata(
            "lerobot_local", f"LeRobot {policy_type} policy from {checkpoint_dir}", observations, actions
        )

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self, instruction: str, seed: int) -> None:
        """New episode: clear the policy's queues and seed torch (sampling policies use it)."""
        with self._lock:
            if self._policy is None:
                raise PolicyUnavailable("the LeRobot policy is closed")
            self._instruction = instruction
            self._torch.manual_seed(seed)
            self._policy.reset()

    def infer(self, observation: Observation) -> PolicyOutput:
        torch = self._torch
        batch: dict[str, Any] = {}
        for key, image in self._observations.images(observation).items():
            batch[key] = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float().div_(255.0)
        for key, state in self._observations.states(observation).items():
            if state.shape != self._state_shapes[key]:
                raise MissingObservation(
                    f"state {key} has {state.shape[0]} values, the checkpoint expects {self._state_shapes[key]}"
                )
            batch[key] = torch.from_numpy(state.astype(np.float32))
        batch["task"] = self._instruction
        with self._lock, torch.inference_mode():
            if self._policy is None:
                raise PolicyUnavailable("the LeRobot policy is closed")
            try:
                chunk = self._postprocessor(self._policy.predict_action_chunk(self._preprocessor(batch)))
            except Exception as exc:  # torch raises many kinds; re-raised with the cause for the node to report
                raise PolicyUnavailable(f"LeRobot {self._policy_type} inference failed: {exc}") from exc
        raw = chunk.detach().to("cpu").numpy()
        if raw.ndim == 3 and raw.shape[0] == 1:
            raw = raw[0]
        return self._actions.to_output(np.asarray(raw, dtype=np.float64), observation)

    def close(self) -> None:
        self._policy = None
        self._preprocessor = None
        self._postprocessor = None


def make_lerobot_policy(config: PolicyConfig, kinematics: Kinematics | None = None) -> LerobotLocalPolicy:
    """The lerobot_local backend from config: loads the checkpoint now.

    Raises ConfigError when the configuration does not fit the checkpoint (camera or state
    keys, sizes), PolicyUnavailable when the extra is missing or the checkpoint cannot load.
    """
    if not config.lerobot_checkpoint_dir:
        raise ConfigError("backend lerobot_local needs lerobot_checkpoint_dir (a folder saved with save_pretrained)")
    folder = Path(config.lerobot_checkpoint_dir).expanduser()
    missing = [name for name in CHECKPOINT_FILES if not (folder / name).is_file()]
    if missing:  # checked before LeRobot sees the path: a non-folder would send it to the Hub
        raise PolicyUnavailable(f"LeRobot checkpoint {folder} lacks {', '.join(missing)}")
    actions = ActionMapper.from_config(config, config.chunk_horizon, kinematics)
    torch, pretrained_config, factory = _import_lerobot()
    try:
        policy_config = pretrained_config.from_pretrained(folder, local_files_only=True)
        policy_config.device = config.lerobot_device
    except Exception as exc:  # LeRobot and draccus raise many kinds; all mean "cannot load"
        raise PolicyUnavailable(f"cannot read the LeRobot config in {folder}: {exc}") from exc

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

    try:
        policy_class = factory.get_policy_class(policy_config.type)
        policy = policy_class.from_pretrained(folder, config=policy_config, local_files_only=True)
        preprocessor, postprocessor = factory.make_pre_post_processors(
            policy_config,
            pretrained_path=str(folder),
            preprocessor_overrides={"device_processor": {"device": config.lerobot_device}},
        )
    except Exception as exc:  # torch, safetensors and LeRobot raise many kinds
        raise PolicyUnavailable(f"cannot load the LeRobot policy in {folder}: {exc}") from exc
    return LerobotLocalPolicy(
        folder,
        mapper,
        actions,
        torch=torch,
        policy=policy,
        preprocessor=preprocessor,
        postprocessor=postprocessor,
        policy_type=str(policy_config.type),
        state_shapes=states,
    )
