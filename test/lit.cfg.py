# -*- Python -*-
# lit configuration of the mkc test suite. Build paths come from lit.site.cfg.py.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "MKC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "CMakeLists.txt", "unit"]

config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mkc_obj_root, "test")

llvm_config.use_default_substitutions()
llvm_config.with_system_environment(["HOME", "TMP", "TEMP"])
# Every capture in a CHECK-LABEL block is local to it.
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"

# The fused-op library, so tests can check the programs a kernel author sees.
config.substitutions.append(("%mkc_lib", os.path.join(config.mkc_src_root, "lib")))

tool_dirs = [os.path.join(config.mkc_obj_root, "bin"), config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["mk-opt", "mkc", "mk-sim"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
