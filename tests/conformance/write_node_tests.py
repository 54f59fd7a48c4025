"""Writes the ONNX node tests of the installed onnx package to OUT/<case>/{model.onnx, test_data_set_N/*.pb},
the layout of onnx/backend/test/data/node in the wheels that still ship it (1.12). Newer wheels ship
only the generators, which this runs (tools/setup.sh calls it from a venv of onnx 1.23.2).
Usage: python write_node_tests.py OUT"""
import os
import shutil
import sys
import warnings

from onnx import TensorProto, numpy_helper
from onnx.backend.test.case import node


def serialize(value, value_info):
    kind = value_info.type
    if kind.HasField("sequence_type"):
        return numpy_helper.from_list(value, value_info.name).SerializeToString()
    if kind.HasField("optional_type"):
        return numpy_helper.from_optional(value, value_info.name).SerializeToString()
    if kind.HasField("map_type"):
        return numpy_helper.from_dict(value, value_info.name).SerializeToString()
    if isinstance(value, TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, value_info.name).SerializeToString()


def main():
    target = sys.argv[1]
    warnings.filterwarnings("ignore")
    cases = node.collect_testcases(None)
    for case in cases:
        directory = os.path.join(target, case.name)
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        with open(os.path.join(directory, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        for i, (inputs, outputs) in enumerate(case.data_sets or []):
            data_set = os.path.join(directory, f"test_data_set_{i}")
            os.makedirs(data_set)
            for j, value in enumerate(inputs):
                with open(os.path.join(data_set, f"input_{j}.pb"), "wb") as f:
                    f.write(serialize(value, case.model.graph.input[j]))
            for j, value in enumerate(outputs):
                with open(os.path.join(data_set, f"output_{j}.pb"), "wb") as f:
                    f.write(serialize(value, case.model.graph.output[j]))
    print(f"wrote {len(cases)} ONNX node tests to {target}")


if __name__ == "__main__":
    main()
