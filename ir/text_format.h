// The .cir text format: printing and parsing graphs (see docs/text-format.md for the grammar).
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"
#include "ir/status.h"

namespace cleave {

// Prints `graph` as .cir text. print(parse(print(g))) == print(g) exactly.
std::string printGraph(const Graph& graph);

// Parses one graph from `text`. Errors are "file:line:col: message" with ErrorKind::kBadInput.
// `first_line` is the line number of text's first line in `file_name` (for split input files).
// Node locations are set to file_name:line:col unless the text gives an explicit loc(...).
// Result types may be omitted in the text; they are then inferred from the op table.
Expected<Graph> parseGraph(std::string_view text, const std::string& file_name, int first_line = 1);

// Reads and parses a .cir file; a missing or unreadable file is a kBadInput error naming it.
Expected<Graph> parseGraphFile(const std::string& path);

// Parses a .cir file and verifies the graph (the usual way tools load a model).
Expected<Graph> loadGraphFile(const std::string& path);

}  // namespace cleave
