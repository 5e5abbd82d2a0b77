from setuptools import find_packages, setup

package_name = "carryon_perception"

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
    description="Perception from RGB-D cameras: robot self-filter, support planes, object segments, labels, tracks.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": ["perception_node = carryon_perception.node:main"],
    },
)
