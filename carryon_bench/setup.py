from setuptools import find_packages, setup

package_name = "carryon_bench"

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
    description="The benchmarks of CarryOn behind `carryon bench` (not needed on a robot PC).",
    license="Apache-2.0",
    entry_points={
        # `carryon` (carryon_bringup/cli/extensions.py) finds its `bench` command here.
        "carryon.cli_commands": ["bench = carryon_bench.cli:add_bench"],
    },
)
