// The padding-idx pass: nn.Embedding's padding_idx set by table name (see passes/training/embedding_padding.h).
#include "passes/core/pass_manager.h"
#include "passes/training/embedding_padding.h"

namespace cleave {
namespace {

Status setPadding(Graph& graph, const PassOptions& options) {
  std::vector<EmbeddingPadding> specs;
  for (const std::string& item : optionList(options.getString("lookups"))) {
    CLEAVE_ASSIGN_OR_RETURN(EmbeddingPadding spec, parseEmbeddingPadding(item));
    specs.push_back(std::move(spec));
  }
  return setEmbeddingPadding(graph, specs).status();
}

}  // namespace

PassInfo makePaddingIdxPass() {
  return PassInfo{
      .name = "padding-idx",
      .summary = "the embedding lookups (gathers along axis 0) of the tables the globs name get nn.Embedding's "
                 "padding_idx (padding-idx{lookups=TABLE=ID|TABLE=ID}): that row's lookups get no gradient "
                 "(cleave compile --padding-idx); a glob that names no lookup's table is an error",
      .options = {{"lookups", std::string(), "TABLE=ID pairs separated by '|'"}},
      .run = setPadding,
  };
}

}  // namespace cleave
