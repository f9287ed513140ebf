"""Installation script of the isaaclab_torchrl extension."""

import os
import tomllib

from setuptools import find_packages, setup

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "config", "extension.toml"), "rb") as file:
    EXTENSION_TOML = tomllib.load(file)

setup(
    name="isaaclab_torchrl",
    version=EXTENSION_TOML["package"]["version"],
    description=EXTENSION_TOML["package"]["description"],
    keywords=EXTENSION_TOML["package"]["keywords"],
    license="BSD-3-Clause",
    python_requires="==3.12.*",
    package_dir={"": "source"},
    packages=find_packages("source"),
    # the offline asset root is data, not a package
    include_package_data=False,
    package_data={"isaaclab_torchrl": ["offline_assets/**/*"]},
    install_requires=[
        "isaaclab==3.0.0",
        "torchrl>=0.14.1,<0.15",
        "tensordict>=0.14,<0.15",
        "tensorboard",
        "moviepy<2",  # Isaac Lab's video recorder (play.py --video)
    ],
    extras_require={
        "wandb": ["wandb"],
        "neptune": ["neptune"],
        "mlflow": ["mlflow"],
        # scripts/export.py: LEAPP, the version Isaac Lab 3.0's export annotations are made for (isaaclab[leapp])
        "leapp": ["leapp==0.7.2"],
        # the trackers' tests: W&B and Neptune offline, MLflow's client with a local SQLite store (mlflow-skinny is
        # the same client as mlflow, without the UI's server dependencies); the LEAPP export's tests
        "test": [
            "pytest",
            "onnx",
            "onnxruntime",
            "wandb",
            "neptune",
            "mlflow-skinny",
            "sqlalchemy",
            "alembic",
            "leapp==0.7.2",
        ],
    },
    zip_safe=False,
)
