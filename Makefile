# CarryOn on a plain Linux machine (no ROS installed). On a robot PC with ROS 2, use
# `colcon build` + `ros2 launch` instead (README, "Robot PC").
.DEFAULT_GOAL := help
SHELL := /bin/bash

.PHONY: help setup demo test lint docs bench policy policy-demos clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup:  ## virtualenv + pinned ROS 2 wheels + colcon build + env.sh (idempotent)
	@bash scripts/setup.sh

demo: setup  ## the simulated assistant, zero configuration (LLM=local: the offline model plans)
	@LLM="$(LLM)" bash scripts/demo.sh

test: setup  ## lint, type checks, unit, node and multi-process tests
	@bash scripts/test.sh

lint: setup  ## ruff, mypy on core/, interface reference, Dockerfile lint
	@bash scripts/test.sh --lint-only

docs: setup  ## regenerate docs/interfaces.md and docs/parameters.md
	@. ./env.sh && python scripts/gen_docs.py

bench: setup  ## `make bench NAME=graph ARGS=--quick`
	@. ./env.sh && carryon bench $(NAME) $(ARGS)

policy:  ## the learned policy from a seed: record demonstrations, train LeRobot ACT (~1 h on 2 cores; SEED=0)
	@bash scripts/learned_policy.sh all

policy-demos:  ## only record the expert's demonstrations (a LeRobotDataset, ~11 min)
	@bash scripts/learned_policy.sh record

clean:  ## remove build outputs (keeps the virtualenv)
	rm -rf build install log env.sh .venv/.carryon-stamps/build
