"""edgespec's benchmarks: the scripts behind every figure in docs/results.md.

Each script runs from the repository root as ``python -m benchmarks.NAME`` (``--help``
says what it measures and how). ``prompts/`` holds the prompt sets, ``peers/`` what
edgespec is compared with (llama.cpp's C++ tools and server, llama-cpp-python),
``common.py`` what the scripts share, ``results/`` what the published runs wrote and
``gpu/`` the GPU check. README.md lists every published figure with its command.
This package is not part of the edgespec wheel.
"""
