"""The benchmarks behind `carryon bench NAME` (`carryon_bench.benchmarks` registers them all).

A package of their own so that a robot PC installs carryon_bringup without them.
"""
