from setuptools import find_packages, setup

package_name = "carryon_planner"

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
    description="Personalized planner: context, LLM backends, plan schema, validator and repair, executive.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "planner_node = carryon_planner.node:main",
            "llm_server_node = carryon_planner.llm_server_node:main",
        ],
    },
)
