// Fuzz target: the .cir text parser, the verifier and inspect's summary, as `cleave inspect MODEL.cir` runs them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "ir/graph_summary.h"
#include "ir/text_format.h"
#include "ir/verifier.h"

// Any input must parse or fail with an error; a graph that verifies must summarize, and print to
// text that parses back to a graph printing the same (printGraph's round-trip promise).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto graph = cleave::parseGraph(text, "fuzz.cir");
  if (!graph || !cleave::verifyGraph(*graph)) return 0;
  (void)cleave::summarizeGraph(*graph);
  std::string printed = cleave::printGraph(*graph);
  auto reparsed = cleave::parseGraph(printed, "printed.cir");
  if (!reparsed) {
    std::fprintf(stderr, "a verified graph prints to text that does not parse: %s\n--- text:\n%s\n",
                 reparsed.status().message().c_str(), printed.c_str());
    std::abort();
  }
  if (cleave::printGraph(*reparsed) != printed) {
    std::fprintf(stderr, "printing the reparsed graph gives other text\n--- first print:\n%s\n", printed.c_str());
    std::abort();
  }
  return 0;
}
