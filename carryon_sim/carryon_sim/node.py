"""sim_node: the simulated arm + cameras, the default robot for demo, tests, benchmarks.

Scaffolding: the MuJoCo world, sensors and driver arrive with issue #3. The node
listens only to the shielded command topic (the contract every driver keeps) and
answers its services with STATUS_NOT_IMPLEMENTED.
"""

from __future__ import annotations

from typing import Any

from carryon_common.core import names
from carryon_common.core.status import planned
from carryon_common.node import CarryOnNode, latched_qos, run_node
from carryon_interfaces.msg import ActionChunk, EstopState
from carryon_interfaces.srv import SimPerturb, SimReset, SimState
from carryon_sim.core.config import SimConfig

CAPABILITIES = (
    planned("sim.world", 3, "MuJoCo tabletop with Franka Panda and scene YAML files"),
    planned("sim.sensors", 3, "scene and wrist RGB-D + segmentation cameras"),
    planned("sim.driver", 3, "executes released chunks via IK at the control rate, watchdog hold"),
    planned("sim.services", 3, "reset, perturb and ground-truth state"),
)


class SimNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.SIM_NODE, SimConfig, capabilities=CAPABILITIES, **node_kwargs)
        self.set_backends({"world": "mujoco"})
        self.estop_active = False
        self.create_subscription(ActionChunk, names.SHIELD_CHUNK, self._on_chunk, 10)
        self.create_subscription(EstopState, names.ESTOP_STATE, self._on_estop, latched_qos())
        self.serve_not_implemented(SimReset, names.SIM_RESET, "sim.services")
        self.serve_not_implemented(SimPerturb, names.SIM_PERTURB, "sim.services")
        self.serve_not_implemented(SimState, names.SIM_STATE, "sim.services")
        self.set_ready()

    def _on_estop(self, msg: EstopState) -> None:
        self.estop_active = msg.active

    def _on_chunk(self, msg: ActionChunk) -> None:
        self.get_logger().warning(
            f"released chunk {msg.chunk_id} ignored: {self.not_implemented_message('sim.driver')}",
            throttle_duration_sec=5.0,
        )


def main() -> int:
    return run_node(SimNode)
