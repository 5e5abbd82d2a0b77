#!/usr/bin/env bash
# Source ROS 2 and the CarryOn workspace, then run the given command (default: a shell).
# CARRYON_ROS_SETUP / CARRYON_WS_SETUP override the two setup files (tests, other ROS distros).
set -e
ros_setup="${CARRYON_ROS_SETUP:-/opt/ros/jazzy/setup.bash}"
ws_setup="${CARRYON_WS_SETUP:-/ws/install/setup.bash}"
for file in "$ros_setup" "$ws_setup"; do
  if [ ! -f "$file" ]; then
    echo "entrypoint: $file not found: is this the CarryOn image (docker/Dockerfile)?" >&2
    exit 2
  fi
done
# setup.bash files read unset variables: not under `set -u`.
# shellcheck disable=SC1090
source "$ros_setup"
# shellcheck disable=SC1090
source "$ws_setup"
# CARRYON_DDS_INTERFACE=eth1: DDS crosses the network only on the robot's own interface (its
# UDP transport limited to that address, discovery on its subnet); unset, the image keeps DDS on
# this PC (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST). docker/README.md.
if [ -n "${CARRYON_DDS_INTERFACE:-}" ]; then
  profile="$(python3 "$(dirname "$0")/dds_interface.py" "$CARRYON_DDS_INTERFACE" \
    "${FASTDDS_DEFAULT_PROFILES_FILE:?}" "${CARRYON_DDS_PROFILE_OUT:-/tmp/carryon_fastdds.xml}")" || exit 2
  export FASTDDS_DEFAULT_PROFILES_FILE="$profile"
  export ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET
fi
if [ $# -eq 0 ]; then
  set -- bash
fi
exec "$@"
