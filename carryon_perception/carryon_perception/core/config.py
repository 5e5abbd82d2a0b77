"""Configuration of perception_node (also read by `carryon bench perception`)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from carryon_common.core.config import one_of
from carryon_common.core.operator_auth import NodeIdentityConfig

NAMERS = ("none", "vlm")


class PerceptionConfig(NodeIdentityConfig):
    signs_requests: ClassVar[bool] = True  # it reads every user's reference images from memory_node

    backend: str = Field(
        "tabletop",
        description="Perception backend by name: 'tabletop' (depth + colour segmentation on support planes, "
        "labels from the object catalog; no learned weights) or 'open_vocab' (the same pipeline with labels "
        "from a text-prompted detector + segmenter, OWLv2 + SAM from local folders; optional extra).",
    )
    cameras: list[str] = Field(
        ["scene", "wrist"], description="Cameras perceived (topics camera/<name>/color, depth, camera_info, pose)."
    )
    catalog_file: str = Field(
        "perception/catalog_sim.yaml",
        description="Object catalog (reference appearance and size per object), absolute or under the config folder.",
    )
    objects: list[str] = Field(
        [],
        description="Catalog names of the objects expected in the scene (what scene memory lists); [] = every "
        "catalog entry. Identical-looking entries of other scenes are then never confused with them.",
    )
    locations_file: str = Field(
        "planner/locations.yaml",
        description="Named table regions an object is reported in (the planner's locations file).",
    )
    robot_file: str = Field(
        "", description="Robot description for the self-filter ('' = robot/panda.yaml): URDF, joints, base pose."
    )
    rate_hz: float = Field(10.0, gt=0.0, le=60.0, description="Most perception updates per second.")
    max_image_age_s: float = Field(0.5, gt=0.0, description="Depth images older than this are not perceived, s.")
    sync_tolerance_s: float = Field(
        0.02,
        gt=0.0,
        description="A camera's colour image and pose belong to its depth image when stamped within this, s "
        "(a driver stamps aligned colour and depth alike; a robot's RealSense needs enable_sync).",
    )
    max_joint_offset_s: float = Field(
        0.05,
        gt=0.0,
        description="The joint states nearest to a depth image's stamp must be at most this far from it, s; else the "
        "camera is left out (the self-filter would pose the robot where it was not).",
    )
    sync_queue: int = Field(
        10, ge=1, le=100, description="Messages kept per camera stream to find ones of the same instant."
    )
    max_depth_m: float = Field(2.5, gt=0.0, description="Depth returns beyond this range are ignored, metres.")
    workspace_min: list[float] = Field(
        [-0.3, -0.9, 0.25],
        min_length=3,
        max_length=3,
        description="Lower corner (x, y, z in 'world', metres) of the box perceived: the floor and the room are not.",
    )
    workspace_max: list[float] = Field(
        [1.4, 0.9, 1.6], min_length=3, max_length=3, description="Upper corner of the box perceived, metres."
    )
    self_filter_margin_m: float = Field(
        0.02, gt=0.0, description="Points this close to the robot's model surface are the robot, metres."
    )
    self_filter_tool_margin_m: float = Field(
        0.012,
        gt=0.0,
        description="The same near the tool end (hand and fingers), tighter: an object next to the fingers stays "
        "visible to the shield, metres.",
    )
    min_object_height_m: float = Field(
        0.006, gt=0.0, description="Points higher than this above a support plane are objects (else the support), m."
    )
    max_object_height_m: float = Field(
        0.6, gt=0.0, description="Points higher than this above every support are ignored (not on the table), m."
    )
    plane_distance_m: float = Field(0.008, gt=0.0, description="RANSAC inlier band of a support plane, metres.")
    plane_min_inliers: int = Field(
        1500, ge=10, description="Fewest 1 cm voxels of a support plane (a plate's top must not be one)."
    )
    chroma_edge: float = Field(
        0.045, gt=0.0, description="Chromaticity step between neighbour pixels that separates two objects."
    )
    depth_jump_m: float = Field(0.01, gt=0.0, description="Depth step between neighbour pixels that separates, m.")
    track_match_m: float = Field(
        0.06, gt=0.0, description="An unidentified object within this of one in the last frame is the same, m."
    )
    open_vocab_detector_dir: str = Field(
        "",
        description="open_vocab: local folder of an OWLv2 detector (Owlv2ForObjectDetection and its processor, "
        "save_pretrained layout); nothing is downloaded.",
    )
    open_vocab_segmenter_dir: str = Field(
        "",
        description="open_vocab: local folder of a SAM-family segmenter (SamModel and its processor, "
        "save_pretrained layout); nothing is downloaded.",
    )
    open_vocab_prompts: list[str] = Field(
        [],
        description="open_vocab: object names the detector looks for besides `objects` (or, when that is [], "
        "every catalog entry); each name is the label of what it finds. While a plan executes, the objects its "
        "subtasks name are asked for first.",
    )
    open_vocab_prompt_template: str = Field(
        "a photo of a {}",
        description="open_vocab: the detector's text query, '{}' replaced by an object name (underscores as spaces).",
    )
    open_vocab_score_threshold: float = Field(
        0.1, gt=0.0, lt=1.0, description="open_vocab: lowest detector score (0..1) of a box that names an object."
    )
    open_vocab_device: str = Field(
        "cpu", min_length=1, description="open_vocab: torch device the models run on ('cpu', 'cuda', 'cuda:1')."
    )
    namer: Annotated[str, one_of("namer", NAMERS)] = Field(
        "none",
        description="Naming of unidentified objects: 'none' (they stay unknown_<n>) or 'vlm' (a colour crop of each "
        "is named once per track by an OpenAI-compatible vision-language model).",
    )
    namer_base_url: str = Field(
        "", description="namer vlm: base URL of the OpenAI-compatible endpoint, e.g. http://host:8000/v1."
    )
    namer_model: str = Field("", description="namer vlm: model name sent with each request.")
    namer_api_key_env: str = Field(
        "CARRYON_VLM_API_KEY",
        description="namer vlm: name of the environment variable holding the API key (never the key itself; "
        "unset = no key, for local servers).",
    )
    namer_request_timeout_s: float = Field(10.0, gt=0.0, description="namer vlm: timeout of one request, seconds.")
    namer_retry_s: float = Field(
        30.0, gt=0.0, description="namer vlm: an object whose request failed is asked again after this long, seconds."
    )
    namer_image_max_px: int = Field(
        256, ge=32, le=2048, description="namer vlm: the crop's longer side is scaled down to at most this, pixels."
    )
    namer_json_mode: bool = Field(
        True, description="namer vlm: ask for response_format json_object (llama.cpp, vLLM, OpenAI support it)."
    )
