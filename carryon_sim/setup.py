from setuptools import find_packages, setup

package_name = "carryon_sim"

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
    description=(
        "MuJoCo tabletop world, simulated robot + camera driver, and the in-process simulation harness "
        "for benchmarks and tests."
    ),
    license="Apache-2.0",
    entry_points={
        "console_scripts": ["sim_node = carryon_sim.node:main"],
        # The scripted stand-in VLAs, found by policy_node's backend registry (carryon_policy/core/backends.py).
        "carryon.policy_backends": [
            "sim_scripted = carryon_sim.harness.stand_in:sim_scripted",
            "sim_scripted_safe = carryon_sim.harness.stand_in:sim_scripted_safe",
        ],
    },
)
