// suggest.h — "did you mean": the known word nearest a misspelled one (edit distance), shared by
// the spec reader (unknown keys, ops, ...) and the command line (unknown commands and flags).
#pragma once
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace gr {

// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent swaps.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

// The known word closest to `word`, or "" when none is close: within a third of the word's length
// (at least 1, at most 3 edits), or one that starts with it / it starts with (a prefix).
template <class Words>
std::string suggest(std::string_view word, const Words& known) {
  if (word.empty() || word.size() > 64) return "";
  std::string best;
  size_t best_d = std::min<size_t>(3, std::max<size_t>(1, word.size() / 3)) + 1;
  for (const auto& k : known) {
    const std::string_view kv(k);
    if (kv == word) continue;
    size_t d = edit_distance(word, kv);
    if (d >= best_d && word.size() >= 3 && (kv.starts_with(word) || word.starts_with(kv))) d = best_d - 1;
    if (d < best_d) best_d = d, best = std::string(kv);
  }
  return best;
}

// `; did you mean "WORD"?` or "".
template <class Words>
std::string did_you_mean(std::string_view word, const Words& known) {
  const std::string s = suggest(word, known);
  return s.empty() ? "" : "; did you mean \"" + s + "\"?";
}

}  // namespace gr
