import os
from glob import glob

from setuptools import find_packages, setup

package_name = "carryon_bringup"


def _config_tree():
    """(install dir, files) pairs mirroring config/ (a symlink to the workspace's config/) into share/."""
    entries = []
    for folder, _dirs, files in os.walk("config", followlinks=True):
        paths = [os.path.join(folder, f) for f in sorted(files) if f.endswith((".yaml", ".md", ".xml"))]
        if paths:
            entries.append((os.path.join("share", package_name, folder), paths))
    return entries


setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
        (f"share/{package_name}/launch", glob("launch/*.launch.py")),
        (f"share/{package_name}/rviz", glob("rviz/*.rviz")),
        # The graph description and parameter files, for `ros2 launch` on a robot PC.
        *_config_tree(),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="CarryOn maintainers",
    maintainer_email="maintainers@carryon-robotics.org",
    description="Launch description, process launcher, operator CLI, recorder and replay of CarryOn.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "carryon = carryon_bringup.cli.main:main",
            "recorder_node = carryon_bringup.recorder_node:main",
        ],
    },
)
