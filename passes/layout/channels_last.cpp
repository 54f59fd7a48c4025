// Channels-last layout: NHWC convolutions and max pools, with transposes moved to the region's edges.
#include "passes/layout/channels_last.h"

#include <map>
#include <set>
#include <string>

#include "ir/ops/image_layout.h"

namespace cleave {
namespace {

class ChannelsLastConversion {
 public:
  ChannelsLastConversion(Graph& graph, std::vector<int64_t>* node_group) : graph_(graph), node_group_(node_group) {}

  Expected<ChannelsLastReport> run() {
    ChannelsLastReport report;
    if (graph_.trains()) return report;
    // 1. Per rewritten node, in program order: the nodes replacing it, appended, then moved aside.
    const size_t original = graph_.nodes.size();
    for (size_t i = 0; i < original; ++i) {
      const Node node = graph_.nodes[i];  // a copy: appending nodes moves the vector
      const size_t first_new = graph_.nodes.size();
      bool rewritten = false;
      if (isNchwImageOp(node)) {
        CLEAVE_TRY(rewrite(node, /*set_layout=*/true));
        ++report.converted_nodes;
        rewritten = true;
      } else if (readsOnlyNhwcImages(node)) {
        CLEAVE_TRY(rewrite(node, /*set_layout=*/false));
        rewritten = true;
      }
      if (!rewritten) continue;
      for (size_t k = first_new; k < graph_.nodes.size(); ++k) replacements_[i].push_back(std::move(graph_.nodes[k]));
      graph_.nodes.resize(first_new);
    }
    if (replacements_.empty()) return report;
    // 2. The new nodes in the old ones' places, every use of an old result redirected to its NCHW
    //    copy; transposes nothing reads go.
    std::vector<Node> nodes;
    std::vector<int64_t> groups;
    for (size_t i = 0; i < original; ++i) {
      const int64_t group = node_group_ && !node_group_->empty() ? (*node_group_)[i] : 0;
      auto it = replacements_.find(i);
      if (it == replacements_.end()) {
        nodes.push_back(std::move(graph_.nodes[i]));
        groups.push_back(group);
        continue;
      }
      for (Node& node : it->second) {
        nodes.push_back(std::move(node));
        groups.push_back(group);
      }
    }
    auto redirect = [&](ValueId& v) {
      auto it = nchw_copy_.find(v);
      if (it != nchw_copy_.end()) v = it->second;
    };
    for (Node& node : nodes)
      for (ValueId& v : node.operands) redirect(v);
    for (ValueId& v : graph_.outputs) redirect(v);
    for (StateUpdate& update : graph_.updates) redirect(update.new_value);
    graph_.nodes = std::move(nodes);
    std::vector<bool> dead = unusedTransposes();
    for (size_t i = 0; i < graph_.nodes.size(); ++i)
      if (!dead[i] && graph_.nodes[i].op == OpId::transpose && made_transposes_.count(graph_.nodes[i].results[0]))
        ++report.transposes;
    if (node_group_ && !node_group_->empty()) *node_group_ = std::move(groups);
    graph_.eraseNodes(dead, node_group_);
    return report;
  }

 private:
  // A conv2d or max_pool2d over NCHW f32 images.
  bool isNchwImageOp(const Node& node) const {
    if (node.op != OpId::conv2d && node.op != OpId::max_pool2d) return false;
    auto layout = node.attrs.find("layout");
    if (layout != node.attrs.end() && std::get<std::string>(layout->second) != kChannelsFirst) return false;
    const TensorType& x = graph_.values[node.operands[0]].type;
    return x.rank() == 4 && x.dtype == DType::kF32 && node.results.size() == 1;
  }

  // A fusable elementwise node whose image operands all have NHWC copies already (its result's
  // shape, none broadcast) and whose other operands are single values.
  bool readsOnlyNhwcImages(const Node& node) const {
    if (!opDef(node.op).fusable || node.results.size() != 1) return false;
    const TensorType& result = graph_.values[node.results[0]].type;
    if (result.rank() != 4) return false;
    bool any_image = false;
    for (ValueId v : node.operands) {
      const TensorType& type = graph_.values[v].type;
      if (type.numel() == 1 && type.rank() <= 4) continue;
      if (type.shape != result.shape || !nhwc_copy_.count(v)) return false;
      any_image = true;
    }
    return any_image;
  }

  // v's NHWC copy: made by a transpose before the node being rewritten, the first time it is asked for.
  Expected<ValueId> nhwcCopy(ValueId v, const SourceLoc& loc) {
    auto it = nhwc_copy_.find(v);
    if (it != nhwc_copy_.end()) return it->second;
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> t,
                            graph_.addNode(OpId::transpose, {v}, {{"perm", toChannelsLastPerm()}}, loc,
                                           {graph_.uniqueName(graph_.values[v].name + ".nhwc")}));
    made_transposes_.insert(t[0]);
    nhwc_copy_.emplace(v, t[0]);
    return t[0];
  }

  // Emits `node` over NHWC copies of its images (with layout NHWC when `set_layout`), then the
  // transpose of its result back to NCHW under the result's name.
  Status rewrite(const Node& node, bool set_layout) {
    std::vector<ValueId> operands;
    for (size_t k = 0; k < node.operands.size(); ++k) {
      const ValueId v = node.operands[k];
      const bool image = set_layout ? k == 0 : graph_.values[v].type.numel() != 1 || nhwc_copy_.count(v);
      if (!image) {
        operands.push_back(v);
        continue;
      }
      CLEAVE_ASSIGN_OR_RETURN(ValueId copy, nhwcCopy(v, node.loc));
      operands.push_back(copy);
    }
    AttrMap attrs = node.attrs;
    if (set_layout) attrs["layout"] = std::string(kChannelsLast);
    const ValueId result = node.results[0];
    const std::string name = graph_.values[result].name;
    CLEAVE_TRY(graph_.renameValue(result, graph_.uniqueName(name + ".replaced")));
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> nhwc, graph_.addNode(node.op, std::move(operands), std::move(attrs),
                                                                      node.loc, {graph_.uniqueName(name + ".nhwc")}));
    CLEAVE_ASSIGN_OR_RETURN(std::vector<ValueId> back, graph_.addNode(OpId::transpose, {nhwc[0]},
                                                                      {{"perm", toChannelsFirstPerm()}}, node.loc, {name}));
    made_transposes_.insert(back[0]);
    nhwc_copy_[result] = nhwc[0];
    nchw_copy_[result] = back[0];
    return Status::ok();
  }

  // The transposes this conversion made whose results nothing reads (walking backwards, so a
  // transpose read only by dead ones goes too).
  std::vector<bool> unusedTransposes() const {
    std::vector<int> uses(graph_.values.size(), 0);
    for (const Node& node : graph_.nodes)
      for (ValueId v : node.operands) ++uses[v];
    for (ValueId v : graph_.outputs) ++uses[v];
    for (const StateUpdate& update : graph_.updates) ++uses[update.new_value];
    std::vector<bool> dead(graph_.nodes.size(), false);
    for (size_t i = graph_.nodes.size(); i-- > 0;) {
      const Node& node = graph_.nodes[i];
      if (node.op != OpId::transpose || !made_transposes_.count(node.results[0]) || uses[node.results[0]] > 0) continue;
      dead[i] = true;
      --uses[node.operands[0]];
    }
    return dead;
  }

  Graph& graph_;
  std::vector<int64_t>* node_group_;
  std::map<size_t, std::vector<Node>> replacements_;  // node index -> the nodes replacing it
  std::map<ValueId, ValueId> nhwc_copy_;               // NCHW value -> the same images NHWC
  std::map<ValueId, ValueId> nchw_copy_;               // old result -> the transpose back that replaces it
  std::set<ValueId> made_transposes_;                  // results of the transposes this conversion made
};

}  // namespace

Expected<ChannelsLastReport> convertToChannelsLast(Graph& graph, std::vector<int64_t>* node_group) {
  return ChannelsLastConversion(graph, node_group).run();
}

}  // namespace cleave
