from setuptools import find_packages, setup

package_name = "carryon_arm"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{package_name}"]),
        (f"share/{package_name}", ["package.xml"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="CarryOn maintainers",
    maintainer_email="maintainers@carryon-robotics.org",
    description="Real-arm adapter: shielded chunks to joint trajectories or pose targets, cameras from YAML.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "arm_adapter_node = carryon_arm.node:main",
            "fake_controller = carryon_arm.fake_controller:main",
        ],
    },
)
