"""Configuration of perception_node (also read by `carryon bench perception`)."""

from __future__ import annotations

from pydantic import Field

from carryon_common.core.config import NodeConfig


class PerceptionConfig(NodeConfig):
    backend: str = Field(
        "tabletop",
        description="Perception backend by name: 'tabletop' (depth + colour segmentation on support planes, "
        "labels from the object catalog; no learned weights).",
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
    max_image_age_s: float = Field(
        0.5, gt=0.0, description="Images older than this (or than the joint states by more) are not perceived, s."
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
