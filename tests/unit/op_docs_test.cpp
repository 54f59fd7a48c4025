// Checks docs/ops.md against the op table: every op has a row, every row names an op that exists.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ir/op_table.h"

namespace cleave {
namespace {

// The cells of a markdown table row "| a | b |" (trimmed).
std::vector<std::string> cellsOf(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream row(line.substr(1));
  std::string cell;
  while (std::getline(row, cell, '|')) {
    size_t first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
    cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
  }
  return cells;
}

// Every op name in the first column of the tables whose first header cell is "op" (a cell may
// name several ops, "add, sub, mul"), with the line it is on.
std::multimap<std::string, int> documentedOps(std::istream& doc) {
  std::multimap<std::string, int> ops;
  bool in_op_table = false;
  std::string line;
  for (int number = 1; std::getline(doc, line); ++number) {
    if (line.empty() || line[0] != '|') {
      in_op_table = false;
      continue;
    }
    std::vector<std::string> cells = cellsOf(line);
    if (cells.empty()) continue;
    if (cells[0] == "op") {
      in_op_table = true;
      continue;
    }
    if (!in_op_table || cells[0].starts_with("---")) continue;
    std::stringstream names(cells[0]);
    std::string name;
    while (std::getline(names, name, ',')) {
      size_t first = name.find_first_not_of(' '), last = name.find_last_not_of(' ');
      if (first != std::string::npos) ops.emplace(name.substr(first, last - first + 1), number);
    }
  }
  return ops;
}

std::multimap<std::string, int> readDocs() {
  std::ifstream doc(std::string(CLEAVE_SOURCE_DIR) + "/docs/ops.md");
  EXPECT_TRUE(doc.is_open()) << "cannot read docs/ops.md";
  return documentedOps(doc);
}

TEST(OpDocs, EveryOpOfTheTableHasARow) {
  const std::multimap<std::string, int> documented = readDocs();
  ASSERT_FALSE(documented.empty()) << "docs/ops.md has no op table";
  for (const OpDef& def : allOpDefs()) {
    size_t rows = documented.count(std::string(def.name));
    EXPECT_EQ(rows, 1u) << "docs/ops.md: op " << def.name << (rows == 0 ? " has no row" : " has several rows");
  }
}

TEST(OpDocs, EveryRowNamesAnOpThatExists) {
  for (const auto& [name, line] : readDocs())
    EXPECT_TRUE(lookupOp(name).has_value()) << "docs/ops.md:" << line << ": no op named '" << name << "'";
}

TEST(OpDocs, ReadsOpNamesFromTheFirstColumnOfOpTables) {
  std::stringstream doc(
      "| op | operands |\n| --- | --- |\n| add, sub | a, b |\n| relu | x |\n\ntext\n| kind | op |\n| x | y |\n");
  const std::multimap<std::string, int> ops = documentedOps(doc);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops.count("add"), 1u);
  EXPECT_EQ(ops.find("sub")->second, 3);
  EXPECT_EQ(ops.find("relu")->second, 4);
}

}  // namespace
}  // namespace cleave
