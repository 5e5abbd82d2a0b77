"""Configuration of judge_node (also read by `carryon bench judge` and the tests)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from carryon_common.core.config import one_of
from carryon_common.core.operator_auth import NodeIdentityConfig

JUDGE_BACKENDS = ("vlm", "geometric")
IMAGE_FORMATS = ("png", "jpeg")


class JudgeConfig(NodeIdentityConfig):
    backend: Annotated[str, one_of("judge backend", JUDGE_BACKENDS)] = Field(
        "geometric",
        description="Judge backend by name: 'vlm' (OpenAI-compatible vision-language model) or 'geometric' "
        "(instance masks + depth, no model).",
    )
    stuck_timeout_s: float = Field(
        20.0, gt=0.0, description="No task-relevant progress of the target for this long -> failed, seconds."
    )
    progress_m: float = Field(
        0.01, gt=0.0, description="A target displacement that counts as progress (monitor mode), metres."
    )
    progress_confirm_updates: int = Field(
        2,
        ge=1,
        description="A change of the target's state (held, inside, seen) counts as progress once it holds for this "
        "many verdicts in a row (perception flicker is not progress).",
    )
    monitor: bool = Field(
        True, description="Publish verdicts on judge/verdict for the active subtask of planner/plan_state."
    )
    period_s: float = Field(1.0, gt=0.0, description="Interval between monitor-mode verdicts, seconds.")
    max_image_age_s: float = Field(
        1.0, gt=0.0, description="Images older than this (node clock) are stale: unable-to-judge, seconds."
    )
    cameras: tuple[str, ...] = Field(
        ("scene", "wrist"), min_length=1, description="Cameras read (topics camera/<name>/...)."
    )
    geometry_file: str = Field(
        "judge/sim_objects.yaml",
        min_length=1,
        description="Object roles and sizes the judge knows (config/judge/objects.yaml layout), relative to the "
        "config folder: judge/sim_objects.yaml in simulation, judge/objects.yaml on a robot.",
    )
    pixel_stride: int = Field(2, ge=1, le=16, description="Geometric judge: use every n-th pixel, pixels.")
    min_points: int = Field(8, ge=1, description="Geometric judge: fewer points of an object = not visible.")
    open_width_m: float = Field(
        0.075, gt=0.0, description="A gripper at least this wide holds nothing (geometric judge), metres."
    )
    vlm_base_url: str = Field(
        "", description="Base URL of the OpenAI-compatible VLM endpoint, e.g. http://host:8000/v1."
    )
    vlm_model: str = Field("", description="VLM model name sent with each request.")
    vlm_api_key_env: str = Field(
        "CARRYON_VLM_API_KEY",
        description="Name of the environment variable holding the VLM API key (never the key itself; "
        "unset = no key, for local servers).",
    )
    vlm_request_timeout_s: float = Field(20.0, gt=0.0, description="Timeout of one VLM request, seconds.")
    vlm_total_timeout_s: float = Field(45.0, gt=0.0, description="Bound on one verdict including retries, seconds.")
    vlm_retries: int = Field(
        2, ge=0, le=10, description="Retries after an invalid reply or a failed request (then unable-to-judge)."
    )
    vlm_image_max_px: int = Field(
        512, ge=32, le=4096, description="Images are downscaled so their longer side is at most this, pixels."
    )
    vlm_image_format: Annotated[str, one_of("image format", IMAGE_FORMATS)] = Field(
        "jpeg", description="Encoding of the images attached to VLM requests: 'png' or 'jpeg'."
    )
    vlm_json_mode: bool = Field(
        True, description="Ask for response_format json_object (llama.cpp, vLLM, OpenAI support it)."
    )
