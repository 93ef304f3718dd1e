"""Packaging for mxmixed: mixed-precision helpers and tutorials for Apache MXNet 1.9.1.

The base install pulls in no MXNet build: choose one with an extra, ``cpu`` for the
``mxnet`` wheel or ``cu112`` for ``mxnet-cu112``. Always install with
``-c constraints.txt`` so that pip cannot upgrade numpy past 1.23.5.
"""
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"',
                    (HERE / "mxmixed" / "_version.py").read_text()).group(1)

setup(
    name="mxmixed",
    version=VERSION,
    description="Float16 mixed-precision training and inference for Apache MXNet "
                "(Gluon and Symbol APIs): helpers, CPU emulation and tutorials.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.8,<3.12",
    packages=find_packages(include=["mxmixed", "mxmixed.*"]),
    # the emulation's rounding op, compiled on first use (mxmixed/emulation/_round16_build.py)
    package_data={"mxmixed.emulation": ["_ext/*.cc", "_ext/*.h"]},
    install_requires=[
        "numpy>=1.16,<1.24",
        "scikit-learn>=1.0",
        "tqdm>=4.50",
        "matplotlib>=3.3",
    ],
    extras_require={
        "cpu": ["mxnet==1.9.1"],
        "cu112": ["mxnet-cu112==1.9.1"],
        # the notebooks, the examples and the tests build gluoncv's model zoo (no weights)
        # (pycocotools: gluoncv's mask transforms for Mask R-CNN import it, and gluoncv would
        # otherwise try to pip-install it at run time)
        "tutorials": ["gluoncv==0.10.5.post0", "opencv-python<4.12", "pycocotools"],
        # JupyterLab, to open the notebooks (`make notebooks` installs it): nothing in the tests
        # or the docs build runs it, and its server stack is over a quarter of the install
        "notebooks": ["jupyter"],
        # pytest-xdist: `make test` runs on one worker per core (pytest.ini); nbval runs the
        # notebooks on ipykernel; ipywidgets draws their progress bars, as in JupyterLab
        "test": ["pytest>=7", "pytest-timeout>=2", "pytest-xdist>=3", "nbval>=0.10",
                 "ipykernel", "ipywidgets", "import-linter>=2.16", "ruff>=0.17"],
        "docs": ["sphinx>=7", "numpydoc>=1.6", "myst-nb>=1.0", "selenium>=4.10"],
        # mxmixed convert --format onnx and symbolic.export_onnx / validate_onnx (docs/onnx.md)
        "onnx": ["onnx", "onnxruntime", "protobuf", "flatbuffers"],
        # benchmarks/zoo.py's side-by-side with onnxconverter-common (pinned in constraints.txt;
        # these versions work with numpy 1.23.5 on Python 3.11)
        "bench": ["onnx", "onnxruntime", "onnxconverter-common", "protobuf", "flatbuffers"],
        # GluonNLP's BERT, Transformer and language models in the NLP tests, notebook and
        # benchmark; mxmixed itself never imports it. Its sdist compiles a Cython extension:
        # install cython and wheel first, then this extra with --no-build-isolation (the Makefile)
        "nlp": ["gluonnlp==0.10.0"],
        # Horovod over gloo (docs/distributed.md): its sdist compiles against the MXNet already
        # installed, so it goes in after the cpu extra, with --no-build-isolation and
        # HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 (the Makefile);
        # mxmixed imports it only in mxmixed.distributed
        "horovod": ["horovod==0.28.1"],
    },
    entry_points={"console_scripts": ["mxmixed=mxmixed.cli:main"]},
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
