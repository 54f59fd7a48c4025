# lit configuration for cleave's pass tests: text IR in, FileCheck on text IR out.
import os
import lit.formats

config.name = "cleave"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".cir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.cleave_tools_dir, "..", "tests", "lit-out")
config.excludes = ["Inputs"]
config.environment["PATH"] = os.pathsep.join(
    [config.cleave_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
config.substitutions.append(("%cleave_src", config.cleave_source_dir))
