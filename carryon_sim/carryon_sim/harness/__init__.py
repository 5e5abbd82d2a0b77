"""The one in-process simulation harness: runs the system's own code on the MuJoCo world
without ROS, for benchmarks and tests. Runtime nodes never import it.

The one labelled exception is the scripted stand-in VLA (`stand_in`): it reads simulator
truth by design, and policy_node loads it when chosen by name (`sim_scripted`,
`sim_scripted_safe`), through the entry point carryon_sim's setup.py declares in the
group `carryon.policy_backends`; the policy package never names it.
"""
