from setuptools import find_packages, setup

setup(
    name="primus_megatron",
    version="0.1.0",
    description="Zero-bubble pipeline schedules (ZB-H1/H2, auto, ZB-V, V-Half, V-Min) behind Megatron-core's forward_backward_func",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["primus_megatron", "primus_megatron.*"]),
    include_package_data=True,
    package_data={"primus_megatron": ["data/corpus/*.jsonl", "data/corpus/*.md", "data/corpus/*.txt",
                                       "schedules/profiles/*.profile.json"]},  # advise's GPU profiles
    install_requires=[],  # the planner is pure Python; the runtime needs the `runtime` extra
    extras_require={
        # the supported megatron-core: 0.16.1 (the last on Python 3.11) or 0.19.x (Python 3.12; README,
        # "Supported versions"); psutil: megatron's checkpoint writer
        "runtime": ["torch==2.13.0", "megatron-core==0.16.1; python_version < '3.12'",
                    "megatron-core>=0.19,<0.20; python_version >= '3.12'", "numpy", "psutil"],
        "plot": ["matplotlib>=3.7"],
        "ilp": ["highspy>=1.7"],
        "te": ["transformer-engine[pytorch]"],
        "test": ["pytest>=8", "hypothesis>=6.100", "matplotlib>=3.7", "highspy>=1.7"],
    },
    entry_points={"console_scripts": ["primus-pipeline=primus_megatron.cli:main"]},
)
