"""streamrace: races and memory aliasing between CUDA streams inside captured CUDA graphs."""

import re
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

try:
    from pybind11.setup_helpers import Pybind11Extension
except ImportError:  # pyproject.toml's build requirements bring it; without them, pure Python
    Pybind11Extension = None

HERE = Path(__file__).parent
AUTOSTART_PTH = "streamrace-autostart.pth"
# The native recorder hooks are compiled on first use against the program's own torch
# (streamrace/record/native.py), so their sources travel inside the package.
NATIVE_SOURCES = HERE / "csrc" / "recorder"
NATIVE_PACKAGE_DIR = Path("streamrace") / "record" / "_native_src"

# The C++ analysis core (csrc/, docs/performance.md). Optional: where it does not compile the
# install still succeeds and streamrace.analysis runs its pure-Python engine, same findings.
EXT_MODULES = []
if Pybind11Extension is not None:
    EXT_MODULES.append(
        Pybind11Extension(
            "streamrace._core",
            ["csrc/core.cpp"],
            depends=sorted(str(p.relative_to(HERE)) for p in (HERE / "csrc").glob("*.h")),
            cxx_std=17,
            # It builds with no warnings of ours (tests/test_cxx_warnings.py holds CI to that).
            extra_compile_args=["-Wall", "-Wextra"],
            optional=True,
        )
    )


class BuildWithAutostart(build_py):
    """Ship a .pth next to the package: with STREAMRACE=1 in its environment, every Python
    process of an unmodified program starts recording (docs/recording.md); and the native
    hooks' C++ sources inside it."""

    def _extra_files(self) -> list[tuple[Path, Path]]:
        build = Path(self.build_lib)
        files = [(HERE / AUTOSTART_PTH, build / AUTOSTART_PTH)]
        files += [(src, build / NATIVE_PACKAGE_DIR / src.name) for src in sorted(NATIVE_SOURCES.iterdir())]
        return files

    def run(self) -> None:
        super().run()
        for src, dst in self._extra_files():
            self.mkpath(str(dst.parent))
            self.copy_file(str(src), str(dst))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *(str(dst) for _, dst in self._extra_files())]


VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "streamrace" / "__init__.py").read_text()).group(1)

setup(
    name="streamrace",
    version=VERSION,
    description="Find cross-stream races and graph-pool aliasing in captured CUDA graphs (PyTorch)",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["streamrace", "streamrace.*"]),
    package_data={"streamrace": ["py.typed", "library_protocols.toml"], "streamrace.report": ["assets/*"]},
    # torch is deliberately absent: recording uses the torch the user already has, and the
    # analysis needs none. An unpinned torch requirement would pull a multi-GB CUDA build.
    # orjson parses traces about twice as fast as the standard library (docs/performance.md); a
    # small wheel (about 130 kB) wherever the marker holds. Elsewhere (PyPy, other machines, where
    # it would build from Rust sources) it is left out and the reader uses the standard library.
    install_requires=[
        "rich>=13.0",
        "tomli>=1.1; python_version < '3.11'",
        "orjson>=3.9; platform_python_implementation == 'CPython' and platform_machine in 'x86_64 AMD64 aarch64 arm64'",
    ],
    extras_require={
        # ninja: torch.utils.cpp_extension builds the native recorder hooks with it.
        "record": ["nvidia-ml-py>=12.0", "ninja>=1.11"],
        # ruff is pinned because `ruff format --check` in .ci/run changes verdicts between releases.
        "test": [
            "pytest>=8.0",
            "hypothesis>=6.0",
            "ruff==0.17.6",
            # mypy too: a new release finds new errors; `mypy` in the root runs pyproject's config.
            "mypy==2.4.1",
            "pytest-xdist>=3.0",
            "jsonschema>=4.0",
            # The brute-force references (tests/oracle.py, tests/graph_truth_reference.py).
            "networkx>=3.0",
            "ninja>=1.11",
            # tests/test_cxx_warnings.py compiles the analysis core with its headers.
            "pybind11>=2.11",
            # tests/test_browser_report.py drives headless Chromium (Debian's, through its chromedriver).
            "selenium>=4.10",
        ],
    },
    ext_modules=EXT_MODULES,
    cmdclass={"build_py": BuildWithAutostart},
    entry_points={
        "console_scripts": ["streamrace=streamrace.cli:console"],
        "pytest11": ["streamrace = streamrace.pytest_plugin"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Environment :: GPU :: NVIDIA CUDA",
        "Topic :: Software Development :: Debuggers",
    ],
)
