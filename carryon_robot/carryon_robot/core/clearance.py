"""How far each part of the hand must stay from any obstacle point: the defaults.

The shield refuses a chunk whose predicted pose brings a part closer than its clearance
(shield_node's `hand_threshold_m`, `finger_threshold_m`, `carried_threshold_m` start from
these; config/nodes/shield_node.yaml may set others), and recovery picks grasps that keep
them, so both read the same numbers. Per-part layout of the paper's Table 7. Metres.
"""

from __future__ import annotations

HAND_CLEARANCE_M = 0.02  # the hand: palm, flange and wrist
FINGER_CLEARANCE_M = 0.008  # the fingers
CARRIED_CLEARANCE_M = 0.015  # a carried object
