"""The peers edgespec is measured against: llama.cpp's own C++ tools (``cpp``), its
``llama-server`` (``llama_server``), both built by ``build_peer_tools.sh``, and
llama-cpp-python's high-level ``Llama`` (``llama_cpp_python``)."""
