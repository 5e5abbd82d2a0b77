from setuptools import find_packages, setup

package_name = "carryon_robot"

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
    description="The robot model: URDF kinematics and IK, hand and finger geometry, clearance defaults.",
    license="Apache-2.0",
)
