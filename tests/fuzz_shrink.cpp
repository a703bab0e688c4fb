// fuzz_shrink.cpp — the differential fuzzer's shrinker: the smallest graph that still fails.
//
// 1. Parts: a bundle's seeds (name prefix "s<seed>_") are removed by delta debugging (halves, then
//    quarters, ... then one at a time) while the failure holds.
// 2. Nodes, last to first, each with the first candidate that still fails:
//    - drop it when nothing uses it (and it is not a loss);
//    - bypass it: its consumers take one of its inputs that has the same shape;
//    - replace it by a const leaf of its shape (0.75 everywhere: inside every op's domain).
//    Rounds repeat until nothing changes. Unused leaves and dead nodes are dropped on the way.
// A candidate that is not a valid spec counts as "does not fail" (the predicate catches the error).
#include <algorithm>
#include <map>

#include "support/fuzz_graph.h"

namespace gr::fuzz {

namespace {

std::string part_of(const std::string& name) {
  const size_t u = name.find('_');
  return u == std::string::npos ? "" : name.substr(0, u + 1);
}

Graph keep_parts(const Graph& g, const std::set<std::string>& parts) {
  Graph out;
  for (const Leaf& l : g.leaves)
    if (parts.count(part_of(l.name))) out.leaves.push_back(l);
  for (const Node& n : g.nodes)
    if (parts.count(part_of(n.id))) out.nodes.push_back(n);
  for (const std::string& l : g.losses)
    if (parts.count(part_of(l))) out.losses.push_back(l);
  for (const auto& [k, v] : g.l2)
    if (parts.count(part_of(k))) out.l2[k] = v;
  return out;
}

// Drops nodes no loss depends on and leaves nothing uses.
Graph prune(const Graph& g) {
  std::set<std::string> live(g.losses.begin(), g.losses.end());
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it)
    if (live.count(it->id)) live.insert(it->inputs.begin(), it->inputs.end());
  Graph out = g;
  out.nodes.clear();
  out.leaves.clear();
  for (const Node& n : g.nodes)
    if (live.count(n.id)) out.nodes.push_back(n);
  for (const Leaf& l : g.leaves)
    if (live.count(l.name)) out.leaves.push_back(l);
  for (auto it = out.l2.begin(); it != out.l2.end();)
    it = live.count(it->first) ? std::next(it) : out.l2.erase(it);
  return out;
}

Graph replace_uses(const Graph& g, size_t at, const std::string& by) {
  Graph out = g;
  const std::string id = g.nodes[at].id;
  out.nodes.erase(out.nodes.begin() + static_cast<long>(at));
  for (Node& n : out.nodes)
    for (std::string& in : n.inputs)
      if (in == id) in = by;
  for (std::string& l : out.losses)
    if (l == id) l = by;
  return out;
}

const std::vector<int64_t>* shape_of(const Graph& g, const std::string& name) {
  for (const Leaf& l : g.leaves)
    if (l.name == name) return &l.shape;
  for (const Node& n : g.nodes)
    if (n.id == name) return &n.shape;
  return nullptr;
}

}  // namespace

Graph shrink(const Graph& start, const std::function<bool(const Graph&)>& fails, int max_trials, int* trials) {
  Graph g = start;
  int used = 0;
  auto attempt = [&](const Graph& cand) {
    if (used >= max_trials) return false;
    ++used;
    if (!fails(cand)) return false;
    g = cand;
    return true;
  };
  // 1. parts (delta debugging over the seeds of a bundle)
  std::vector<std::string> parts;
  for (const std::string& l : g.losses)
    if (std::find(parts.begin(), parts.end(), part_of(l)) == parts.end()) parts.push_back(part_of(l));
  for (size_t chunks = 2; parts.size() > 1 && used < max_trials;) {
    bool reduced = false;
    const size_t per = (parts.size() + chunks - 1) / chunks;
    for (size_t c = 0; c * per < parts.size() && !reduced; ++c) {
      for (int complement = 0; complement < 2 && !reduced; ++complement) {
        std::set<std::string> keep;
        for (size_t i = 0; i < parts.size(); ++i)
          if ((i / per == c) != (complement == 1)) keep.insert(parts[i]);
        if (keep.empty() || keep.size() == parts.size()) continue;
        if (attempt(keep_parts(g, keep))) {
          std::vector<std::string> rest;
          for (const std::string& p : parts)
            if (keep.count(p)) rest.push_back(p);
          parts = rest;
          chunks = complement ? std::max<size_t>(chunks - 1, 2) : 2;
          reduced = true;
        }
      }
    }
    if (!reduced) {
      if (chunks >= parts.size()) break;
      chunks = std::min(parts.size(), chunks * 2);
    }
  }
  // 2. nodes
  attempt(prune(g));
  int counter = 0;
  for (bool changed = true; changed && used < max_trials;) {
    changed = false;
    for (size_t i = g.nodes.size(); i-- > 0 && used < max_trials;) {
      if (i >= g.nodes.size()) continue;
      const Node n = g.nodes[i];
      const bool is_loss = std::find(g.losses.begin(), g.losses.end(), n.id) != g.losses.end();
      bool used_by = false;
      for (const Node& m : g.nodes)
        used_by = used_by || std::find(m.inputs.begin(), m.inputs.end(), n.id) != m.inputs.end();
      if (!used_by && !is_loss) {
        Graph c = g;
        c.nodes.erase(c.nodes.begin() + static_cast<long>(i));
        if (attempt(prune(c))) { changed = true; continue; }
      }
      bool done = false;
      for (const std::string& in : n.inputs) {
        const std::vector<int64_t>* s = shape_of(g, in);
        if (!s || *s != n.shape) continue;
        if (attempt(prune(replace_uses(g, i, in)))) { done = true; break; }
      }
      if (done) { changed = true; continue; }
      if (!is_loss && n.op != "const") {
        int64_t numel = 1;
        for (int64_t d : n.shape) numel *= d;
        Graph c = replace_uses(g, i, "shrunk_k" + std::to_string(counter));
        c.leaves.push_back(Leaf{"shrunk_k" + std::to_string(counter), false, n.shape, std::vector<double>(static_cast<size_t>(numel), 0.75)});
        ++counter;
        if (attempt(prune(c))) changed = true;
      }
    }
  }
  if (trials) *trials = used;
  return g;
}

}  // namespace gr::fuzz
